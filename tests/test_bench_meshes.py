"""scripts/bench_meshes.py on the CPU: the DFG 2D-1 slab (the smallest sample case) at refine 0,
two nonlinear steps: a row with what the run measured and the saved table."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "meshes", "dfg2d", "dfg_2d_1_slab.toml")


def test_row_of_a_short_run(tmp_path):
    cmd = [
        sys.executable,
        os.path.join(ROOT, "scripts", "bench_meshes.py"),
        "--device",
        "cpu",
        "--cases",
        CASE,
        "--refine",
        "0",
        "--max-steps",
        "2",
        "--no-warmup",
        "--runs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    [row] = json.loads((tmp_path / "meshes_t.json").read_text())["rows"]
    assert (row["elements"], row["unknowns"], row["refine"]) == (222, 9336, 0) and row["solver"] == "mg"
    assert (
        row["levels"] == [222, 69] and row["smoother"] == "element Vanka" and row["coarse_solve"] == "superlu (3,162)"
    )
    assert row["steps"] == 2 and row["linear_iterations"] > 0 and not row["converged"]  # stopped by --max-steps: exit 3
    assert 0 < row["run_s"] <= row["wall_s"] and row["max_rss_bytes"] > 1e7 and row["device_pool_bytes"] is None
    assert set(row["quantities"]) == {"c_D", "c_L", "delta_p"} and 5 < row["quantities"]["c_D"] < 7
    assert row["relative_errors"]["delta_p"] == pytest.approx(row["quantities"]["delta_p"] / 0.11752016697 - 1)
    md = (tmp_path / "meshes_t.md").read_text()
    assert f"| dfg_2d_1_slab.toml | 0 | 222 | 9,336 | {row['solver']} |" in md and "n/a" in md


def test_failed_run_is_a_row(tmp_path):
    case = tmp_path / "bad.toml"
    case.write_text('[mesh]\nfile = "missing.msh"\n[fluid]\nnu = 0.01\n[boundary]\nwalls = "wall"\n')
    cmd = [
        sys.executable,
        os.path.join(ROOT, "scripts", "bench_meshes.py"),
        "--device",
        "cpu",
        "--cases",
        str(case),
        "--no-warmup",
        "--runs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path),
        "--tag",
        "bad",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    [row] = json.loads((tmp_path / "meshes_bad.json").read_text())["rows"]
    assert row["error"].startswith("exit 2: ") and "missing.msh" in row["error"]
    assert "| bad.toml | 0 | failed: exit 2: " in (tmp_path / "meshes_bad.md").read_text()


def test_add_keeps_the_saved_rows_and_replaces_a_rerun(tmp_path):
    def bench(*cases, add=False):
        cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_meshes.py"), "--device", "cpu", "--no-warmup"]
        cmd += ["--cases", *map(str, cases), "--runs", str(tmp_path / "runs"), "--results", str(tmp_path)]
        p = subprocess.run(cmd + ["--tag", "t"] + (["--add"] if add else []), capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return json.loads((tmp_path / "meshes_t.json").read_text())

    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    for case in (first, second):
        case.write_text(f'[mesh]\nfile = "{case.stem}.msh"\n[fluid]\nnu = 0.01\n[boundary]\nwalls = "wall"\n')
    bench(first, second)
    record = bench(second, add=True)
    assert [os.path.basename(r["case"]) for r in record["rows"]] == ["first.toml", "second.toml"]
    assert len(record["commands"]) == 2 and "--add" in record["commands"][1]
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_meshes.py"), "--cases", str(first), "--tag", "u"]
        + ["--results", str(tmp_path), "--add"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--add: no saved record" in p.stderr
