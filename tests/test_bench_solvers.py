"""scripts/bench_solvers.py on the CPU at toy size: both solvers reach the same flow, and
the saved table holds what the runs measured."""
import json
import os
import subprocess
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def test_paper_and_mg_rows_on_a_small_box(tmp_path):
    cmd = [sys.executable, os.path.join(SCRIPTS, "bench_solvers.py"), "--device", "cpu", "--n", "4", "--re", "100",
           "--runs", str(tmp_path / "runs"), "--results", str(tmp_path), "--tag", "t"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "bench_solvers_t.json").read_text())
    paper, mg = data["rows"]
    assert (paper["solver"], mg["solver"]) == ("paper", "mg") and paper["converged"] and mg["converged"]
    assert abs(paper["largest_deviation"] - mg["largest_deviation"]) < 1e-4  # the same discrete flow
    assert mg["linear_iterations"] < paper["linear_iterations"] / 10
    assert paper["setups"] == paper["steps"] and 1 <= mg["setups"] <= mg["steps"]  # mg may keep a preconditioner
    assert os.path.isdir(tmp_path / "runs" / "warmup" / "mg_n8_re100")  # the untimed run came first
    md = (tmp_path / "bench_solvers_t.md").read_text()
    speed = paper["run_s"] / mg["run_s"]
    assert f"| 4 | 100 | mg | {mg['steps']} ({mg['newton_steps']}) | {mg['setups']} | {mg['linear_iterations']} |" in md
    assert f"{speed:.1f}x" in md and "untimed 8^3 run" in md


def test_profile_multigrid_times_every_smoothed_level(tmp_path):
    cmd = [sys.executable, os.path.join(SCRIPTS, "profile_multigrid.py"), "--device", "cpu", "--n", "6", "--re", "100",
           "--repeats", "3", "--results", str(tmp_path), "--tag", "t"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "profile_multigrid_t.json").read_text())
    (level,) = data["levels"]  # 6^3 -> 3^3, solved directly: one smoothed level
    assert (level["elements"], level["unknowns"]) == (216, 6934)
    assert 0 < level["product_ms"] < level["smoothing_ms"] < data["cycle"]["v_cycle_ms"]  # a smoothing holds 10 products
    assert data["cycle"]["coarse_inverse_ms"] > 0
    assert "| 0 | 216 | 6,934 |" in (tmp_path / "profile_multigrid_t.md").read_text()
    bad = subprocess.run(cmd[:4] + ["--n", "5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--n 5 has no coarser level: take at least 6")
