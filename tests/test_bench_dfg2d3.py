"""scripts/bench_dfg2d3.py on the CPU: the DFG 2D-3 slab at refine 0, two steps of 0.01: a row
with what the run measured and the saved table."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_row_of_a_short_run(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_dfg2d3.py"), "--device", "cpu", "--runs"]
    cmd += ["slab:0:midpoint:0.01", "--t-end", "0.02", "--no-warmup", "--runs-folder", str(tmp_path / "runs")]
    cmd += ["--results", str(tmp_path), "--tag", "t"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    [row] = json.loads((tmp_path / "dfg2d3_t.json").read_text())["rows"]
    assert (row["elements"], row["unknowns"], row["steps"], row["time_step"]) == (222, 9336, 2, 0.01)
    assert row["scheme"] == "midpoint" and row["converged"] and row["newton_steps"] >= 2
    assert 0 < row["c_d_max"] < 1 and row["c_l_min"] <= row["c_l_max"]  # the inflow has barely started
    assert row["relative_errors"]["c_d_max"] == pytest.approx(row["c_d_max"] / 2.950921575 - 1)
    case = (tmp_path / "runs" / "slab_r0_midpoint_dt0.01" / "case.toml").read_text()
    assert 'scheme = "midpoint"' in case and "t_end = 0.02" in case and "area = 0.005" in case
    assert "| slab | 0 | 222 | 9,336 | midpoint | 0.01 | 2 |" in (tmp_path / "dfg2d3_t.md").read_text()


def test_bad_runs_are_refused(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_dfg2d3.py"), "--runs", "slab:1:euler:0.01"]
    p = subprocess.run([*cmd, "--tag", "t", "--results", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--runs: 'slab:1:euler:0.01': MESH slab or fine" in p.stderr
