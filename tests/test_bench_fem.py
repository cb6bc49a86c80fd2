"""scripts/bench_fem.py on the CPU at toy size: the figures it saves follow from what it measured."""

import json
import os
import subprocess
import sys

import pytest

from fem3d.kernels import ebe
from fem3d.kernels.ebe import NL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")


def bench(tmp_path, *args):
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "bench_fem.py"),
        "--device",
        "cpu",
        "--results",
        str(tmp_path),
        "--runs",
        str(tmp_path / "runs"),
        "--tag",
        "t",
        *args,
    ]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )  # this checkout's packages
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads((tmp_path / "fem_t.json").read_text()), (tmp_path / "fem_t.md").read_text()


def test_bytes_a_product_must_move():
    assert ebe.bytes_moved(10, 1000) == 10 * 89 * (89 * 8 + 4) + 16 * 1000
    assert ebe.bytes_moved(10, 1000, itemsize=4) == 10 * 89 * (89 * 4 + 4) + 16 * 1000
    assert (
        ebe.bytes_moved(10, 1000, itemsize=2) == 10 * 89 * (89 * 2 + 4 + 4) + 16 * 1000
    )  # float16 rows and their float32 scales


def test_phases_and_segmented_solve(tmp_path):
    data, md = bench(
        tmp_path,
        "--parts",
        "phases",
        "solves",
        "--sizes",
        "2",
        "--re",
        "400",
        "--matrix-dtypes",
        "float64",
        "float32",
        "--segment-steps",
        "2",
    )
    p = data["phases"]["cpu/2/float64"]
    assert p["elements"] == 8 and p["product_bytes"] == ebe.bytes_moved(8, p["unknowns"])
    assert data["phases"]["cpu/2/float32"]["product_bytes"] == ebe.bytes_moved(8, p["unknowns"], 4)
    assert p["a_gbs"] == pytest.approx(p["product_bytes"] / p["a_ms"] / 1e6)
    assert p["cg_iteration_ms"] > 0 and p["element_matrices_s"] > 0 and p["preconditioner_s"] > 0
    # the sum-factorised operator beside the stored matrices, Picard and Newton: the same products
    for dtype, itemsize in (("float64", 8), ("float32", 4)):
        q = data["phases"][f"cpu/2/{dtype}"]
        assert q["stored_bytes_per_element"] == NL * NL * itemsize
        for kind in ("picard", "newton"):
            o = q["operators"][kind]
            assert (
                o["pa_bytes_per_element"] == (10 * 8 + 40 * 4) * 27 + NL * 4
            )  # room for the Newton Jacobian's float32 point data
            for key in ("stored_a", "stored_at", "pa_a", "pa_at"):
                assert o[f"{key}_ms"] > 0
                assert o[f"{key}_munknowns_s"] == pytest.approx(q["unknowns"] / o[f"{key}_ms"] / 1e3)
            assert 1e-10 < o["rel_diff"] <= 1e-6  # float32's rounding of the point data (or of the stored matrices)
        assert q["pa_rel_diff"] == max(o["rel_diff"] for o in q["operators"].values())
    assert "| 2 | float64 | cpu | 402 | newton |" in md
    s = data["solves"]["1/2/400/float64"]
    assert s["segments"][0]["picard_steps"] == 2 and s["resumable"] == (s["reason"] == "max_steps")
    assert s["t_unit_us"] == pytest.approx(s["t_run_s"] * 1e6 / (s["picard_steps"] * 8))
    # a second call continues the unconverged row from its solution.npy and sums the segments
    data2, _ = bench(
        tmp_path,
        "--parts",
        "solves",
        "--sizes",
        "2",
        "--re",
        "400",
        "--matrix-dtypes",
        "float64",
        "--segment-steps",
        "50",
    )
    s2 = data2["solves"]["1/2/400/float64"]
    assert s2["converged"] and len(s2["segments"]) == 2
    assert s2["picard_steps"] == sum(g["picard_steps"] for g in s2["segments"]) > 2
    assert s2["t_run_s"] == pytest.approx(sum(g["t_run_s"] for g in s2["segments"]))
    assert s2["wall_s"] == pytest.approx(sum(g["wall_s"] for g in s2["segments"])) and s2["t_run_s"] <= s2["wall_s"]
    assert sum(
        s2["times_s"][k] for k in ("data_preparation", "element_matrices", "linear_setup", "solve")
    ) == pytest.approx(s2["t_run_s"])
    assert "cpu/2/float32" in data2["phases"]  # rows of the first call kept
    assert "## Table 3 layout: Re 400" in md and "| 2 | float64 | cpu |" in md


def test_tables_set_our_unit_time_beside_the_papers():
    sys.path.insert(0, SCRIPTS)
    import bench_fem

    cpu = {
        "n": 40,
        "matrix_dtype": "float64",
        "kind": "cpu",
        "unknowns": 1663244,
        "a_ms": 400.0,
        "a_gbs": 10.0,
        "at_ms": 440.0,
        "at_gbs": 9.0,
        "vector_ms": 40.0,
        "cg_iteration_ms": 740.0,
        "mesh_s": 1.0,
        "setup_s": 9.0,
        "element_matrices_s": 21.0,
        "preconditioner_s": 42.0,
    }
    solve = {
        "n": 40,
        "re": 1000.0,
        "ranks": 1,
        "matrix_dtype": "float64",
        "partial": False,
        "device": "gpu 0: X",
        "unknowns": 1663244,
        "elements": 64000,
        "converged": True,
        "reason": "converged",
        "picard_steps": 30,
        "cg_iterations": 31140,
        "t_run_s": 116.1,
        "t_unit_us": 60.47,
        "picard_step_s": 3.8,
    }
    md = bench_fem.markdown(
        {"meta": {"device": "X"}, "phases": {"cpu/40/float64": cpu}, "solves": {"1/40/1000/float64": solve}}
    )
    row = next(line for line in md.splitlines() if line.startswith("| 40^3"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    expected_cpu = (1.0 + 9.0 + 30 * (21.0 + 42.0) + (31140 + 120) * 0.74) * 1e6 / (30 * 64000)
    assert cells[3] == f"{expected_cpu:.1f}" and cells[4] == "60.5"
    assert cells[6:10] == ["265879.9", "3924.4", "3215.1", "2956.2"]
    assert cells[10] == f"{expected_cpu / 60.47:.0f}x" and cells[11] == f"{3924.4 / 60.47:.0f}x"
    # a phase row recorded before the sum-factorised operator was measured: blank cells
    assert "| 40 | float64 | cpu | 1,663,244 | – |" + " |" * 8 in md.splitlines()


def test_a_sum_factorised_operator_unlike_the_stored_one_stops_the_run(monkeypatch):
    """phase_row exits, naming the difference, when the products differ by more than PA_TOLERANCE."""
    sys.path.insert(0, SCRIPTS)
    import bench_fem
    from gpucfd.backend import get_backend

    monkeypatch.setattr(bench_fem, "PA_TOLERANCE", {"float32": 0.0})  # round-off alone exceeds it
    with pytest.raises(SystemExit, match="sum-factorised and stored products differ by"):
        bench_fem.phase_row(get_backend("cpu"), 2, "float64", 1.0, None, False)
