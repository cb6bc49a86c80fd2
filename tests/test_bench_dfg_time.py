"""scripts/bench_dfg_time.py on the CPU: a short run of DFG 2D-3 (the slab at refine 0, two
steps of 0.01), a row with what it measured and the saved table, a row added to it (--add); 3D-3Z's case and row, 2D-2's
row; the references read from fem3d/reference_data."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "bench_dfg_time.py")


def bench(tmp_path, case, runs, t_end, *more):
    cmd = [sys.executable, SCRIPT, "--case", case, "--device", "cpu", "--runs", *runs, "--t-end", str(t_end), *more]
    cmd += ["--no-warmup", "--runs-folder", str(tmp_path / "runs"), "--results", str(tmp_path), "--tag", "t"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads((tmp_path / f"dfg{case}_t.json").read_text()), (tmp_path / f"dfg{case}_t.md").read_text()


def test_row_of_a_short_2d3_run(tmp_path):
    record, md = bench(tmp_path, "2d3", ["slab:0:midpoint:0.01"], 0.02)
    [row] = record["rows"]
    assert (row["elements"], row["unknowns"], row["steps"], row["time_step"]) == (222, 9336, 2, 0.01)
    assert row["scheme"] == "midpoint" and row["converged"] and row["newton_steps"] >= 2 and row["tolerance"] is None
    assert 0 < row["c_d_max"] < 1 and row["c_l_min"] <= row["c_l_max"]  # the inflow has barely started
    assert record["references"]["c_d_max"]["reference"] == 2.950921575
    assert row["relative_errors"]["c_d_max"] == pytest.approx(row["c_d_max"] / 2.950921575 - 1)
    case = (tmp_path / "runs" / "slab_r0_midpoint_dt0.01" / "case.toml").read_text()
    assert 'scheme = "midpoint"' in case and "t_end = 0.02" in case and "area = 0.005" in case
    assert "| slab | 0 | 222 | 9,336 | midpoint | 0.01 | fixed | 2 (0) |" in md
    record, md = bench(tmp_path, "2d3", ["slab:0:bdf2:0.01"], 0.01, "--add")  # a row added to the record
    assert [(r["scheme"], r["steps"]) for r in record["rows"]] == [("midpoint", 2), ("bdf2", 1)]
    assert len(record["commands"]) == 2 and "--add" in record["commands"][1] and "--add" in md
    assert "| slab | 0 | 222 | 9,336 | bdf2 | 0.01 | fixed | 1 (0) |" in md


def test_the_3d3z_case_and_the_2d2_quantities():
    """The 3D-3Z case as a run poses it (adaptive steps, the committed channel); 3D-3Z's row
    from a summary's series, 2D-2's from its periodic record (St, c_D,max and c_L,max over the
    last periods, inside or outside the 1996 intervals; n/a before the flow is periodic)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_dfg_time as bench

    spec = bench.parse_run("channel:1:bdf2:0.02:1e-3", ("channel",))
    case = bench.case_text(os.path.join(ROOT, bench.CASES["3d3z"][1]), "m.msh", None, spec, 0.5)
    assert 'file = "m.msh"' in case and "dt = 0.02\ntolerance = 0.001" in case and "t_end = 0.5" in case
    assert "area = 0.041" in case and "sin(pi*t/8)" in case
    lift, drag, dp = (bench.COLUMNS[k] for k in ("c_l", "c_d", "delta_p"))
    series = {
        drag: {"max": 3.31, "t_max": 4.0},
        lift: {"max": 0.0028, "t_max": 1.0, "min": -0.011, "t_min": 3.9},
        dp: {"end": -0.1},
    }
    summary = {
        "device": "cpu",
        "converged": True,
        "mesh": {"elements": 624},
        "dofs": 19502,
        "times_s": {},
        "time": {
            "steps": 100,
            "rejected_steps": 1,
            "dt_range": [0.01, 0.1],
            "newton_steps": 200,
            "linear_iterations_per_newton_step": 3.0,
            "seconds_per_step": 0.1,
            "series": series,
        },
    }
    row = bench.row_of("3D-3Z", spec, "cmd", 12.0, summary, bench.references("3D-3Z"))
    assert row["c_l_min"] == -0.011 and row["relative_errors"]["c_l_min"] == pytest.approx(-0.011 / -0.010999 - 1)
    assert row["in_1996_bounds"] == {"c_d_max": False}  # above [3.20, 3.30]
    summary["time"]["periodic"] = {lift: {"max": 1.005}, drag: {"max": 3.25}}
    summary["time"]["strouhal"] = {"value": 0.3}
    row = bench.row_of("2D-2", spec, "cmd", 12.0, summary, bench.references("2D-2"))
    assert row["in_1996_bounds"] == {"strouhal": True, "c_d_max": False, "c_l_max": True}
    assert "| 0.3000 (inside) | 3.2500 (outside) | 1.0050 (inside) |" in bench.table("2D-2", [row])
    summary["time"]["periodic"], summary["time"]["strouhal"] = {}, None
    row = bench.row_of("2D-2", spec, "cmd", 12.0, summary, bench.references("2D-2"))
    assert row["strouhal"] is None and "| n/a | n/a | n/a |" in bench.table("2D-2", [row])


def test_bad_runs_are_refused(tmp_path):
    cmd = [sys.executable, SCRIPT, "--case", "2d3", "--runs", "slab:1:euler:0.01", "--tag", "t"]
    p = subprocess.run([*cmd, "--results", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--runs: 'slab:1:euler:0.01': MESH slab or medium or fine" in p.stderr
    cmd = [sys.executable, SCRIPT, "--case", "3d3z", "--runs", "slab:1:bdf2:0.01", "--tag", "t"]
    p = subprocess.run([*cmd, "--results", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "MESH channel or layer" in p.stderr


def test_the_made_slabs(tmp_path):
    """The medium slab (the CPU's 2D-3 runs) as make_slab.py makes it in the runs folder: 64
    cells round the cylinder and 10 rings, 3 + 40 cells up- and downstream, 0.05 thick; made once."""
    import meshio

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_dfg_time as bench

    path, thickness = bench.mesh_file("medium", str(tmp_path))
    assert path == str(tmp_path / "medium_slab.msh") and thickness == 0.05
    mesh = meshio.read(path)
    assert len(mesh.cells_dict["hexahedron27"]) == 64 * 10 + 64 // 4 * (3 + 40)  # the ring, then 16 across
    assert mesh.points[:, 2].max() == pytest.approx(0.05)
    stamp = os.path.getmtime(path)
    assert bench.mesh_file("medium", str(tmp_path))[0] == path and os.path.getmtime(path) == stamp
