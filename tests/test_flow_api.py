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
from support import ANNULUS_CASE_TEXT, DFG_CASE_TEXT, case_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DFG_CASE = os.path.join(ROOT, "meshes", "dfg3d", "dfg_3d_1z.toml")
C_D, DELTA_P = 6.18533, 0.17102  # DFG 3D-1Z (Braack & Richter 2006)


def without_times(summary: dict) -> dict:
    """A summary without what differs between two runs of one flow: seconds, files, the
    command line, and what only a program adds (the cavity's validation against references,
    the case file and the quantities it asks for)."""
    skip = {"times_s", "t_run_s", "t_unit_us", "wall_s", "wall_since", "per_rank", "partition", "files"}
    skip |= {"command", "warnings", "validation", "accuracy", "case", "refine", "quantities"}
    out = {k: v for k, v in summary.items() if k not in skip}
    out["mesh"] = {k: v for k, v in summary["mesh"].items() if k in ("elements", "velocity_nodes", "pressure_nodes")}
    for stage in out["continuation"] + [s for coarse in out["sequence"] for s in coarse["stages"]]:
        for step in stage["steps"]:
            step.pop("seconds")
    for coarse in out["sequence"]:
        coarse.pop("seconds")
    return out


def test_the_cavity_through_the_api_equals_the_cavity_command_bit_for_bit(tmp_path):
    """One pipeline: the cavity command and the API give the same solution bit for bit and
    the same summary, but for times and the command's own additions."""
    args = ["--n", "4", "--re", "100", "--device", "cpu", "--no-plots", "--no-vtu", "--quiet", "--out", str(tmp_path)]
    assert cavity_main(args) == 0
    walls = {tag: fem3d.Wall() for tag in ("x0", "x1", "y0", "z0", "z1")}
    flow = fem3d.Flow(fem3d.box_mesh(4), {"y1": fem3d.Velocity(1, 0, 0), **walls}, re=100.0)
    result = flow.solve(device="cpu", nonlinear=NonlinearOptions(tol=1e-6, max_steps=200, newton=1.0))
    assert result.converged
    assert np.array_equal(result.x, np.load(tmp_path / "solution.npy"))
    command = json.loads((tmp_path / "summary.json").read_text())
    api = json.loads(json.dumps(result.summary()))
    assert without_times(api) == without_times(command)
    assert command["nonlinear_steps"] == len(result.steps) > 2 and command["mesh"]["box"] == [4, 4, 4]
    assert (
        abs(result.pressure([[0.5, 0.5, 0.5]])[0]) < 1.0 and result.force("y1")[0] < 0
    )  # the fluid holds the lid back


def test_a_continuation_that_stops_early_leaves_the_flow_as_given():
    """A continuation from Re 5 to 50 stopped at Re 5 (one step allowed): the flow's Reynolds
    number stays 50 (the summary's too, marked not converged), and a second solve gives the
    same iterate."""
    walls = {tag: fem3d.Wall() for tag in ("x0", "x1", "y0", "z0", "z1")}
    flow = fem3d.Flow(fem3d.box_mesh(3), {"y1": fem3d.Velocity(1, 0, 0), **walls}, re=50.0)
    options = NonlinearOptions(tol=1e-8, max_steps=1, newton=1.0)
    first = flow.solve(device="cpu", nonlinear=options, continuation="5")
    assert [(s["re"], s["converged"]) for s in first.history] == [(5.0, False)]
    assert flow.re == 50.0 and flow.problem.re == 50.0
    summary = first.summary()
    assert summary["re"] == 50.0 and not summary["converged"] and summary["reason"] == "max_steps"
    second = flow.solve(device="cpu", nonlinear=options, continuation="5")
    assert np.array_equal(first.x, second.x)
    assert [s["residual"] for s in second.history] == [s["residual"] for s in first.history]


ANNULUS_CASE = ANNULUS_CASE_TEXT.replace("[fluid]", "refine = 1\n[fluid]") + '[solver]\nsequence = "1"\n'


def test_mesh_sequencing_through_the_api_and_a_case_file(tmp_path):
    """The annulus (64 elements) refined once, its file mesh solved first: through the API
    and ``fem3d.run`` alike the coarse mesh's solve is recorded and the fine mesh starts
    from it (its first Newton step's residual 0.025, against 0.16 from rest), with the same
    solution bit for bit and the same summary."""
    path = case_file(tmp_path, ANNULUS_CASE)
    case = read_case(path)
    mesh = fem3d.read_mesh(case.mesh_file).refined(1)
    sequenced = fem3d.Flow(mesh, case.boundaries, re=case.re).solve(device="cpu", sequence="1")
    assert [r["elements"] for r in sequenced.sequence] == [64] and sequenced.sequence[0]["converged"]
    assert sequenced.converged and sequenced.steps[0]["kind"] == "newton" and sequenced.steps[0]["residual"] < 0.05
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.run", path, "--device", "cpu", "--no-plots", "--quiet", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.load(out / "solution.npy"), sequenced.x)
    assert without_times(json.loads((out / "summary.json").read_text())) == without_times(
        json.loads(json.dumps(sequenced.summary()))
    )


DFG_TOL = 1e-4  # the case file's 1e-8 takes 6 Newton steps, this 4: c_D moves by 1e-5 relative, delta_p by 7e-5


def run_dfg(out, launch=(), *options):
    """``python -m fem3d.run`` on the DFG case refined once, to the residual DFG_TOL, on the
    CPU, under ``launch`` (an mpiexec command line, or none): its summary."""
    p = subprocess.run(
        [*launch, sys.executable, "-m", "fem3d.run", DFG_CASE, "--refine", "1", "--tol", str(DFG_TOL)]
        + ["--device", "cpu", "--no-plots", "--quiet", "--out", str(out), *options],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def refined_dfg(tmp_path_factory):
    """The serial run of the DFG case refined once (4,992 elements, about 45 s on 2 cores):
    its output folder and summary, shared by the two tests below."""
    out = tmp_path_factory.mktemp("dfg")
    return out, run_dfg(out)


def test_the_dfg_case_refined_once(refined_dfg):
    """The committed DFG 3D-1Z case refined once, run as a user types it but for --tol 1e-4
    (mg on the nested levels): converged in at most 5 Newton steps (4 when written), c_D
    within 0.5 % and delta_p within 1 % of the reference (-0.08 % and +0.33 % when written),
    the lift small and positive, the spanwise force zero by symmetry, at most 5 Krylov
    iterations per Newton step; results and summary written, nothing else."""
    out, summary = refined_dfg
    cyl = summary["quantities"]["forces"]["cylinder"]
    c_d, c_l, c_z = cyl["coefficients"]
    assert abs(c_d - C_D) < 0.005 * C_D and 0 < c_l < 0.02 and abs(c_z) < 1e-8
    assert abs(summary["quantities"]["differences"]["delta_p"] - DELTA_P) < 0.01 * DELTA_P
    assert summary["options"]["linear"]["solver"] == "mg" and summary["linear_iterations_per_step"] <= 5
    assert summary["converged"] and summary["residual"] < DFG_TOL and summary["nonlinear_steps"] <= 5
    assert summary["refine"] == 1 and summary["mesh"]["elements"] == 8 * 624
    assert sorted(os.listdir(out)) == ["flow.vtu", "solution.npy", "summary.json"]


MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


@pytest.mark.skipif(MPIEXEC is None or launched_ranks() > 1, reason="needs mpiexec (and not already under it)")
def test_the_refined_dfg_case_on_three_ranks_gives_the_serial_quantities(refined_dfg, tmp_path):
    """mg on the nested levels of the DFG mesh refined once, its coarse mesh partitioned by
    METIS and the children on their parent's rank, to the residual 1e-4 (4 Newton steps): 3
    ranks (an odd count; a refined file mesh cut by METIS on 2 is the annulus of the MPI
    tests under mpiexec -n 2) take the serial run's Newton steps and FGMRES iterations, and
    their force vector and delta_p agree with the serial ones to 1e-8 (2e-10 when written:
    the ranks repeat the serial iterates to round-off, so the agreement does not rest on a
    tight tolerance)."""
    serial = refined_dfg[1]
    summary = run_dfg(tmp_path, [MPIEXEC, "-n", "3"], "--no-vtu")
    assert summary["ranks"] == 3 and summary["options"]["linear"]["solver"] == "mg" and summary["converged"]
    counts = ("nonlinear_steps", "linear_iterations")
    assert [summary[k] for k in counts] == [serial[k] for k in counts]
    a, b = serial["quantities"], summary["quantities"]
    for x, y in (
        (a["forces"]["cylinder"]["force"], b["forces"]["cylinder"]["force"]),
        ([a["differences"]["delta_p"]], [b["differences"]["delta_p"]]),
    ):
        assert np.linalg.norm(np.subtract(x, y)) <= 1e-8 * np.linalg.norm(x), (x, y)  # the force vector, Δp


GOOD = DFG_CASE_TEXT


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
        with pytest.raises(InputError, match="nu= or the Reynolds number re="):
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


def _cube_flow(**kw):
    walls = {tag: fem3d.Wall() for tag in ("x0", "x1", "y0", "z0", "z1")}
    return fem3d.Flow(fem3d.box_mesh(2), {"y1": fem3d.Velocity(1, 0, 0), **walls}, **kw)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: fem3d.Flow("cube.msh", {}, re=1.0), r"mesh= must be a mesh: fem3d.read_mesh\(path\)"),
        (lambda: fem3d.Flow(fem3d.box_mesh(2), ["wall"], re=1.0), r"boundaries= must be a dict"),
        (lambda: _cube_flow(nu=True), r"nu= must be a number \(got True\)"),
        (lambda: _cube_flow(re="100"), r"re= must be a number \(got '100'\)"),
        (lambda: _cube_flow(re=1e9), r"re= must be > 0 and <= 100000"),
        (lambda: _cube_flow(re=1.0, force=3), r"force= must be a function"),
        (lambda: _cube_flow(re=1.0).solve(device="cpu", initial=np.zeros(5)), r"initial= must hold 402 values"),
        (lambda: _cube_flow(re=1.0).solve(device="cpu", initial="x.npy"), r"initial= must be an array of 402"),
        (lambda: _cube_flow(re=1.0).solve(device="cpu", sequence=None), r"sequence= must be a string"),
        (lambda: _cube_flow(re=1.0).solve(device="cpu", linear={"solver": "mg"}), r"linear= must be a LinearOptions"),
        (lambda: fem3d.LinearOptions(smoothing_steps=30), r"smoothing_steps= must be >= 1 and <= 20 \(got 30\)"),
        (lambda: fem3d.NonlinearOptions(tol=np.float32(2)), r"tol= must be > 0 and < 1 \(got 2.0\)"),
    ],
)
def test_the_api_names_each_bad_argument(make, message):
    with pytest.raises(InputError, match=message):
        make()


def test_the_api_takes_numpy_numbers_alike_and_checks_what_it_is_asked():
    flow = _cube_flow(re=np.float32(10))
    assert flow.re == 10.0 and type(flow.re) is float
    result = flow.solve(device="cpu", linear=fem3d.LinearOptions(smoothing_steps=np.int64(4)))
    assert result.converged and result.options["linear"]["smoothing_steps"] == 4
    with pytest.raises(InputError, match=r"points= must be finite physical points \(P, 3\)"):
        result.pressure([[0.5, np.nan, 0.5]])
    with pytest.raises(InputError, match=r"tag= must be a boundary tag of the mesh: 'x0', 'x1'"):
        result.force("lid")
    assert np.isfinite(result.pressure([0.5, 0.5, 0.5])).all()
