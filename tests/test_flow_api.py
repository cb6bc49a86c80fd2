"""The Python API (fem3d.Flow), the case file (fem3d.problems.case) and ``python -m fem3d.run``."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import fem3d
from gpucfd.errors import InputError
from fem3d.problems.case import read_case
from fem3d.cavity import main as cavity_main
from fem3d.parallel.comm import launched_ranks
from fem3d.solvers.nonlinear import NonlinearOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DFG_CASE = os.path.join(ROOT, "meshes", "dfg3d", "dfg_3d_1z.toml")
C_D, DELTA_P = 6.18533, 0.17102  # DFG 3D-1Z (Braack & Richter 2006)


def test_the_cavity_through_the_api_equals_the_cavity_command_bit_for_bit(tmp_path):
    assert (
        cavity_main(
            ["--n", "4", "--re", "100", "--device", "cpu", "--no-plots", "--no-vtu", "--quiet", "--out", str(tmp_path)]
        )
        == 0
    )
    walls = {tag: fem3d.Wall() for tag in ("x0", "x1", "y0", "z0", "z1")}
    flow = fem3d.Flow(fem3d.box_mesh(4), {"y1": fem3d.Velocity(1, 0, 0), **walls}, re=100.0)
    result = flow.solve(device="cpu", nonlinear=NonlinearOptions(tol=1e-6, max_steps=200, newton=1.0))
    assert result.converged
    assert np.array_equal(result.x, np.load(tmp_path / "solution.npy"))
    assert (
        abs(result.pressure([[0.5, 0.5, 0.5]])[0]) < 1.0 and result.force("y1")[0] < 0
    )  # the fluid holds the lid back


def test_the_dfg_case_refined_once(tmp_path):
    """The committed DFG 3D-1Z case refined once, run as a user types it (mg on the nested
    levels, about 35 s on 2 cores): c_D within 0.5 % and delta_p within 1 % of the
    reference, the lift small and positive, at most 5 Krylov iterations per Newton step;
    results and summary written, nothing else."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "fem3d.run",
            DFG_CASE,
            "--refine",
            "1",
            "--device",
            "cpu",
            "--no-plots",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    cyl = summary["quantities"]["forces"]["cylinder"]
    c_d, c_l, c_z = cyl["coefficients"]
    assert abs(c_d - C_D) < 0.005 * C_D and 0 < c_l < 0.02 and abs(c_z) < 1e-8
    assert abs(summary["quantities"]["differences"]["delta_p"] - DELTA_P) < 0.01 * DELTA_P
    assert summary["options"]["linear"]["solver"] == "mg" and summary["linear_iterations_per_step"] <= 5
    assert summary["converged"] and summary["refine"] == 1 and summary["mesh"]["elements"] == 8 * 624
    assert sorted(os.listdir(tmp_path)) == ["flow.vtu", "solution.npy", "summary.json"]


MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


@pytest.mark.skipif(MPIEXEC is None or launched_ranks() > 1, reason="needs mpiexec (and not already under it)")
def test_the_refined_dfg_case_on_two_and_three_ranks_gives_the_serial_quantities(tmp_path):
    """mg on the nested levels of the DFG mesh refined once, its coarse mesh partitioned and
    the children on their parent's rank: the force vector and delta_p of 1, 2 and 3 ranks
    agree to 1e-8."""
    quantities = []
    for launch in ([], [MPIEXEC, "-n", "2"], [MPIEXEC, "-n", "3"]):
        out = tmp_path / str(len(launch) and launch[-1])
        p = subprocess.run(
            [
                *launch,
                sys.executable,
                "-m",
                "fem3d.run",
                DFG_CASE,
                "--refine",
                "1",
                "--device",
                "cpu",
                "--no-plots",
                "--no-vtu",
                "--quiet",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["ranks"] == (int(launch[-1]) if launch else 1) and summary["options"]["linear"]["solver"] == "mg"
        quantities.append(summary["quantities"])
    serial = quantities[0]
    for parallel in quantities[1:]:
        for a, b in (
            (serial["forces"]["cylinder"]["force"], parallel["forces"]["cylinder"]["force"]),
            ([serial["differences"]["delta_p"]], [parallel["differences"]["delta_p"]]),
        ):
            assert np.linalg.norm(np.subtract(a, b)) <= 1e-8 * np.linalg.norm(a), (a, b)  # the force vector, Δp


def case_file(tmp_path, text):
    path = tmp_path / "case.toml"
    path.write_text(text)
    return str(path)


GOOD = f"""
[mesh]
file = "{os.path.join(ROOT, "meshes", "dfg3d", "channel_coarse.msh")}"
[fluid]
nu = 1e-3
[boundary]
inflow = {{ velocity = ["y*(0.41-y)", 0, 0] }}
walls = "wall"
cylinder = "wall"
outflow = "outflow"
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (("[fluid]", "[fluids]"), r"unknown section \[fluids\]"),
        (("nu = 1e-3", "nu = 1e-3\nrho = 1"), r"unknown key\(s\) rho in \[fluid\]"),
        (("nu = 1e-3", "nu = -1"), r"\[fluid\] nu must be >= 1e-05"),
        (("nu = 1e-3", "re = 20\nnu = 1e-3"), "nu or re"),
        (('"y*(0.41-y)"', "\"__import__('os')\""), 'boundary "inflow" velocity u: the call'),
        (('walls = "wall"', 'walls = "symmetry"'), 'boundary "walls": the condition must be'),
        (('outflow = "outflow"', ""), "faces tagged 'outflow' have no condition"),
        (('outflow = "outflow"', 'outflow = "outflow"\nlid = "wall"'), "'lid' not in the mesh"),
        (("nu = 1e-3", "nu = 1e-3\n[report]\npoints = { a = [1, 2] }"), r"points.a must be \[x, y, z\]"),
        (("nu = 1e-3", "nu = 1e-3\n[report]\ndifferences = { d = ['a', 'b'] }"), "must name two points"),
        (("[mesh]", "[mesh]\ntag_field = 3"), "tag_field"),
        (("nu = 1e-3", "nu = 1e-3\n[solver]\ntol = 2"), r"\[solver\] tol must be"),
        (("nu = 1e-3", "nu = 1e-3 =="), "not a TOML file"),
    ],
)
def test_bad_case_files_are_one_line_input_errors(tmp_path, edit, message):
    path = case_file(tmp_path, GOOD.replace(*edit))
    with pytest.raises(InputError, match=message) as err:
        case = read_case(path)
        fem3d.Flow(fem3d.read_mesh(case.mesh_file, case.tag_field), case.boundaries, nu=case.nu, re=case.re)
    assert "\n" not in str(err.value)


def test_the_run_command_exits_2_with_one_line_and_writes_nothing(tmp_path):
    path = case_file(tmp_path, GOOD.replace("0.41-y", "0.41-q"))
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.run", path, "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "the name 'q' is not allowed" in p.stderr
    assert not out.exists()


def test_flow_needs_one_of_nu_and_re():
    mesh = fem3d.box_mesh(2)
    walls = {tag: fem3d.Wall() for tag in mesh.tag_names}
    for kwargs in ({}, {"nu": 0.1, "re": 10.0}):
        with pytest.raises(InputError, match="nu or the Reynolds number"):
            fem3d.Flow(mesh, walls, **kwargs)


@pytest.mark.parametrize(
    "args, message",
    [(["--refine", "-1"], "--refine must be >= 0 and <= 10"), (["--refine", "9"], "--refine [0-9] fits at most")],
)
def test_bad_refinements_are_one_line_exit_2(tmp_path, args, message):
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.run", DFG_CASE, "--device", "cpu", "--out", str(tmp_path / "o"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and re.search(message, p.stderr), p.stderr
    assert not (tmp_path / "o").exists()


def test_a_stopped_run_continues_from_its_solution(tmp_path):
    """Two Newton steps, stopped (exit 3, marked not converged), then --initial from their
    solution.npy: the rest of the steps, and the coefficients of an uninterrupted run."""

    def run(out, *args):
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "fem3d.run",
                DFG_CASE,
                "--device",
                "cpu",
                "--no-plots",
                "--no-vtu",
                "--quiet",
                "--out",
                str(tmp_path / out),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        return p.returncode, json.loads((tmp_path / out / "summary.json").read_text())

    code, stopped = run("stopped", "--max-steps", "2")
    assert code == 3 and not stopped["converged"] and stopped["nonlinear_steps"] == 2
    code, resumed = run("resumed", "--initial", str(tmp_path / "stopped" / "solution.npy"))
    code_full, full = run("full")
    assert code == code_full == 0 and resumed["nonlinear_steps"] < full["nonlinear_steps"]
    a, b = (np.array(r["quantities"]["forces"]["cylinder"]["coefficients"]) for r in (resumed, full))
    assert np.linalg.norm(a - b) < 1e-6 * np.linalg.norm(b), (a, b)  # both to the residual tolerance 1e-8
