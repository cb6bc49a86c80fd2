"""scripts/bench_cavity_time.py on the CPU: a short run's row and table, rows added to a saved
record, a bad run spec; the oscillation measured from a history with a known decay and
frequency."""

import csv
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "bench_cavity_time.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_cavity_time as bench  # noqa: E402


def bench_run(tmp_path, *extra):
    cmd = [sys.executable, SCRIPT, "--device", "cpu", "--no-warmup", "--runs-folder", str(tmp_path / "runs")]
    cmd += ["--results", str(tmp_path), "--tag", "t", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_rows_of_short_runs_and_rows_added(tmp_path):
    p = bench_run(tmp_path, "--runs", "100:3:midpoint:0.1:0.3")
    assert p.returncode == 0, p.stderr
    p = bench_run(tmp_path, "--add", "--runs", "100:2:bdf2:0.1:0.2")
    assert p.returncode == 0, p.stderr
    record = json.loads((tmp_path / "cavity_unsteady_t.json").read_text())
    first, added = record["rows"]
    assert (first["elements"], first["unknowns"], first["steps"], first["time_step"]) == (27, 1093, 3, 0.1)
    assert (added["elements"], added["steps"], added["scheme"]) == (8, 2, "bdf2")
    assert first["converged"] and first["strouhal"] is None and first["period"] is None  # not periodic in 3 steps
    assert first["u_end"] < 0  # the return flow under the lid's vortex
    assert len(record["commands"]) == 2 and "--add" in record["commands"][1]
    md = (tmp_path / "cavity_unsteady_t.md").read_text()
    assert "| 100 | 3 | 27 | 1,093 | midpoint | 0.1 | 0.3 | 3 |" in md and "| 100 | 2 | 8 |" in md


def test_concurrent_runs_have_their_own_walls(tmp_path):
    """Runs started together: each row's wall ends when its own process ends (the short run's
    row first, its wall below the long one's), each marked as sharing the device."""
    p = bench_run(tmp_path, "--concurrent", "--runs", "100:3:midpoint:0.1:2", "100:2:bdf2:0.1:0.2")
    assert p.returncode == 0, p.stderr
    short, long = json.loads((tmp_path / "cavity_unsteady_t.json").read_text())["rows"]
    assert (short["n"], short["steps"], long["n"], long["steps"]) == (2, 2, 3, 20)
    assert short["wall_s"] < long["wall_s"] and short["concurrent_runs"] == long["concurrent_runs"] == 2


def test_a_bad_run_is_an_input_error(tmp_path):
    p = bench_run(tmp_path, "--runs", "2000:24:rk4:0.2:600")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert "needs RE > 0, N >= 2, SCHEME in bdf2, midpoint and 0 < DT < T_END" in p.stderr
    p = bench_run(tmp_path, "--add", "--runs", "100:2:bdf2:0.1:0.2")
    assert p.returncode == 2 and "--add: no saved record" in p.stderr


def test_the_oscillation_of_a_decaying_history(tmp_path):
    """u = 0.01 + 1e-3 exp(-0.01 t) sin(2 pi 0.0934 t) on steps of 0.4 to t = 1000: the swing's
    rate -0.01 (its envelope), the spectrum's peak at 0.0934."""
    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", bench.COLUMN])
        for k in range(1, 2501):
            t = 0.4 * k
            w.writerow([t, 0.01 + 1e-3 * math.exp(-0.01 * t) * math.sin(2 * math.pi * 0.0934 * t)])
    found = bench.oscillation(str(path))
    assert found["u_rate"] == pytest.approx(-0.01, rel=0.02)
    assert found["u_frequency"] == pytest.approx(0.0934, rel=2e-3)
    assert found["u_swing_last"] == pytest.approx(2e-3 * math.exp(-9), rel=0.1)
