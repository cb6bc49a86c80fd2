"""scripts/bench_solvers.py on the CPU at toy size: both solvers reach the same flow, and
the saved table holds what the runs measured; scripts/profile_multigrid.py on one process
and on two ranks."""

import json
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def test_paper_and_mg_rows_on_a_small_box(tmp_path):
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "bench_solvers.py"),
        "--device",
        "cpu",
        "--n",
        "4",
        "--re",
        "100",
        "--runs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
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
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "profile_multigrid.py"),
        "--device",
        "cpu",
        "--n",
        "6",
        "--re",
        "100",
        "--repeats",
        "5",  # best of 5: a busy machine once timed a smoothing (best of 3) above a cycle that holds two
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "profile_multigrid_t.json").read_text())
    (level,) = data["levels"]  # 6^3 -> 3^3, solved directly: one smoothed level
    assert (level["elements"], level["unknowns"]) == (216, 6934)
    assert (
        0 < level["product_ms"] < level["smoothing_ms"] < data["cycle"]["v_cycle_ms"]
    )  # a smoothing holds 10 products
    assert data["cycle"]["coarse_inverse_ms"] > 0
    assert "| 0 | 216 | 6,934 |" in (tmp_path / "profile_multigrid_t.md").read_text()
    assert (level["partitioned"], level["sums_per_smoothing"], level["values_per_smoothing"]) == (False, 0, 0)
    assert (data["ranks"], data["gpus"]) == (1, None)
    bad = subprocess.run(cmd[:4] + ["--n", "5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--n 5 has no coarser level: take at least 6")


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside this Python")
def test_profile_multigrid_under_mpi_counts_each_partitioned_levels_sums(tmp_path):
    """Two ranks cut the 8^3 box in two slabs of 4 layers: 256 elements on the busiest rank,
    each smoothing step one interface sum for its product and one for its smoother, each
    sending the 17 x 17 x 3 + 9 x 9 entries of the slabs' shared face."""
    from fem3d.solvers.multigrid import SMOOTHING_STEPS

    cmd = [
        MPIEXEC,
        "-n",
        "2",
        sys.executable,
        os.path.join(SCRIPTS, "profile_multigrid.py"),
        "--device",
        "cpu",
        "--n",
        "8",
        "--re",
        "100",
        "--repeats",
        "1",
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads((tmp_path / "profile_multigrid_t.json").read_text())
    (level,) = data["levels"]  # 8^3 -> 4^3, solved directly
    assert (data["ranks"], data["gpus"], level["elements"], level["partitioned"]) == (2, None, 256, True)  # CPU ranks
    # a product and a Vanka application per step, and the correction's Vanka application (krylov.gmres_steps)
    assert level["sums_per_smoothing"] == 2 * SMOOTHING_STEPS + 1
    assert level["values_per_smoothing"] == (2 * SMOOTHING_STEPS + 1) * (17 * 17 * 3 + 9 * 9)
    assert level["reductions_per_smoothing"] > SMOOTHING_STEPS  # GMRES: its dot products
    assert data["command"].startswith("mpirun -n 2 python scripts/profile_multigrid.py")
