"""Input checked before any work (issue #50 item 4): numbers of any type and size, boundary
conditions of wrong types or on empty tags, flows that are not posed (every face outflow,
a velocity component fixed nowhere, net flux into a closed domain), case files too large or
with floods of unknown keys, and a [report] naming tags or points the mesh lacks. Each is
an InputError of one short line that names the input."""

import os
import subprocess
import sys

import numpy as np
import pytest

import fem3d
from fem3d.discretisation.mesh import box_mesh
from fem3d.problems.boundary import Outflow, Slip, Velocity, Wall, outflow_and_inflow, constraints_by_tag
from fem3d.problems.case import check_report, read_case
from fem3d.problems.expressions import Expression
from fem3d.problems.lid_driven import lid_driven_problem
from fem3d.problems.navier_stokes import FlowProblem
from gpucfd.errors import InputError, as_real, check_range, first_few, shown
from support import DFG_CASE_TEXT, case_file, sample_mesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHANNEL = os.path.join(ROOT, "meshes", "dfg3d", "channel_coarse.msh")
BOX_TAGS = ("x0", "x1", "y0", "y1", "z0", "z1")
HUGE = 10**400  # an integer beyond float64


def one_line(call, message) -> str:
    """The message of the InputError that ``call()`` raises: one line containing ``message``."""
    with pytest.raises(InputError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and message in text and len(text) < 300, text
    return text


def test_numbers_of_any_numpy_type_are_floats_and_everything_else_is_refused():
    assert as_real("nu", np.float32(0.5)) == 0.5 and type(as_real("nu", np.int8(3))) is float
    assert as_real("nu", np.array(2.0)) == 2.0 and as_real("nu", 7) == 7.0
    for value, message in [
        (True, "nu must be a number (got True)"),
        (np.True_, "nu must be a number (got True)"),
        ("1", "nu must be a number (got '1')"),
        (None, "nu must be a number (got None)"),
        (1j, "nu must be a number (got 1j)"),
        (float("nan"), "nu must be a finite number (got nan)"),
        (HUGE, "nu must be a finite number (got 10000000000000000000000000000000000... (401 characters))"),
        (10**5000, "nu must be a finite number (got an integer of 16610 bits)"),
    ]:
        assert one_line(lambda: as_real("nu", value), message) == message
    assert (
        one_line(lambda: check_range("--n", HUGE, low=1, high=10, integer=True), "--n must be >= 1 and <= 10")
        == "--n must be >= 1 and <= 10 and finite (got 10000000000000000000000000000000000... (401 characters))"
    )
    assert one_line(lambda: check_range("nu", True, low=0), "") == "nu must be a number (got True)"
    assert first_few(["a", "b", "c", "d", "e", "f"]) == "'a', 'b', 'c', 'd' and 2 more"
    assert (
        first_few(range(2)) == "0, 1" and shown("x" * 100) == "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (102 characters)"
    )


def test_flow_takes_numpy_numbers_and_refuses_a_bool_viscosity():
    mesh = box_mesh(2)
    cavity = {"y1": Velocity(np.float32(1), np.int64(0), 0.0), **{t: Wall() for t in BOX_TAGS if t != "y1"}}
    flow = fem3d.Flow(mesh, cavity, re=np.float32(100))
    assert flow.re == 100.0 and type(flow.problem.re) is float
    assert flow.problem.bc_values[:, 0].max() == 1.0
    one_line(lambda: fem3d.Flow(mesh, cavity, nu=True), " must be a number (got True)")
    one_line(lambda: fem3d.Flow(mesh, cavity, re=HUGE), " must be > 0 and <= 100000 and finite (got 1000")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Velocity(HUGE, 0, 0), "velocity u: expected a finite number or an expression in x, y, z, t (got 1000"),
        (
            lambda: Velocity(None, 0, 0),
            "velocity u: expected a finite number or an expression in x, y, z, t (got None)",
        ),
        (lambda: Velocity(0, float("inf"), 0), "velocity v: expected a finite number"),
        (lambda: Velocity(0, 0, "abc("), "velocity w: 'abc(' is not an expression"),
        (lambda: Expression("1" * 400, "inflow u"), "inflow u: the number 111111"),
        (lambda: Expression("1" * 400, "inflow u"), "(400 characters) in '111"),
        (lambda: Expression("x + " * 50 + "q", "inflow u"), "the name 'q' is not allowed in 'x + x + x"),
        (lambda: Expression("x + " * 50 + "q", "inflow u"), "(203 characters)"),
    ],
)
def test_conditions_and_expressions_of_wrong_types_or_sizes_name_the_input(make, message):
    one_line(make, message)


@pytest.mark.parametrize(
    "conditions, message",
    [
        ([("x0", Wall())], "boundary: the conditions must be a dict {tag name: condition} (got [('x0', Wall())])"),
        ({1: Wall(), 2.5: Wall()}, "boundary: tag names must be strings (got 1, 2.5)"),
        (
            {f"t{k}": Wall() for k in range(1000)},
            "boundary: tag(s) 't0', 't1', 't2', 't3' and 996 more not in the mesh (its tags: inside, x0, x1, y0, y1, "
            "z0, z1)",
        ),
        ({t: Wall() for t in BOX_TAGS} | {"x0": Wall}, 'boundary "x0": the condition must be one of'),
        (
            {t: Wall() for t in BOX_TAGS} | {"x0": {"velocity": list(range(1000))}},
            "(got [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... (4890 characters))",
        ),
        ({t: Wall() for t in BOX_TAGS} | {"inside": Velocity(1, 0, 0)}, "no boundary face carries the tag(s) 'inside'"),
    ],
)
def test_bad_boundary_dicts_are_short_input_errors(conditions, message):
    mesh = box_mesh(2)
    mesh.tag_names["inside"] = 9  # a tag name without faces (a volume group of a file, say)
    one_line(lambda: constraints_by_tag(mesh, conditions), message)


def test_boundary_flux_is_the_divergence_theorem_on_straight_and_curved_meshes():
    graded = box_mesh(3, 2, 4, lengths=(2.0, 1.0, 0.5), grading=0.3)
    out, into, size = outflow_and_inflow(graded, np.arange(graded.n_nodes), graded.points)  # u = x: div u = 3
    assert abs(out - 3.0) < 1e-13 and into == 0.0
    wall = graded.boundary_nodes()  # the field given at the boundary nodes alone, zero inside: the same fluxes
    assert outflow_and_inflow(graded, wall, graded.points[wall]) == (out, into, size)
    annulus = sample_mesh("annulus")  # hexahedron27 with curved faces
    every = np.arange(annulus.n_nodes)
    out, into, _ = outflow_and_inflow(annulus, every, np.tile([1.0, 2.0, 3.0], (annulus.n_nodes, 1)))
    assert out > 5 and abs(out - into) < 1e-13 * out
    out, into, _ = outflow_and_inflow(annulus, every, annulus.points)
    volume = (out - into) / 3
    out, into, _ = outflow_and_inflow(annulus, every, annulus.points * [1.0, 1.0, 0.0])  # div u = 2
    assert abs(volume - 3 * np.pi / 8) < 1e-4  # 0.5 < r < 1, 0 < z < 0.5, to the error of its Q2 geometry
    assert abs(out - into - 2 * volume) < 1e-13


def test_posed_flows_pass_the_check():
    box = box_mesh(3)
    lid_driven_problem(box, 100.0, "y1").check_solvable()  # tangential lid: no flux
    lid_driven_problem(sample_mesh("distorted"), 100.0, "lid").check_solvable()
    walls = {t: Wall() for t in BOX_TAGS}
    FlowProblem.with_conditions(box, 10.0, walls, force=lambda xp, x: x).check_solvable()  # driven by a force
    same = Velocity("16*y*(1-y)*z*(1-z)", 0, 0)
    FlowProblem.with_conditions(box, 10.0, walls | {"x0": same, "x1": same}).check_solvable()  # in = out
    annulus = sample_mesh("annulus")
    FlowProblem.with_conditions(
        annulus, 10.0, {"inner": Velocity("-y", "x", 0), "outer": Wall(), "ends": Wall()}
    ).check_solvable()  # a turning inner cylinder
    fem3d.Flow(
        fem3d.read_mesh(CHANNEL),
        {"inflow": Velocity("y*(0.41-y)", 0, 0), "walls": Wall(), "cylinder": Wall(), "outflow": Outflow()},
        nu=1e-3,
    )


@pytest.mark.parametrize(
    "conditions, message",
    [
        (
            {t: Outflow() for t in BOX_TAGS},
            "every boundary face is outflow: nothing holds or drives the fluid (any constant velocity may be "
            "added to a solution); make some tag a wall or a velocity",
        ),
        (
            {t: Outflow() for t in BOX_TAGS} | {"x0": Slip(), "x1": "slip"},
            "no boundary face prescribes the velocity components v and w (outflow and slip faces leave them free)",
        ),
        (
            {t: Wall() for t in BOX_TAGS} | {"x0": Velocity(1, 0, 0)},
            # the interpolant of 1 inside, 0 on the walls: (5/6)^2 of the face by Simpson's weights
            "net inflow 0.694444 through the prescribed velocities of a closed domain (0.694444 in, 0 out; no "
            "outflow boundary)",
        ),
        (
            {t: Wall() for t in BOX_TAGS} | {"x0": Velocity("sin(pi*y)", 0, 0), "x1": Velocity("sin(pi*y)+0.01", 0, 0)},
            "net outflow 0.00694444 ",
        ),
    ],
)
def test_flows_that_are_not_posed_are_refused_before_any_work(conditions, message):
    one_line(lambda: fem3d.Flow(box_mesh(2), conditions, nu=0.1), message)


def test_an_annulus_whose_inner_wall_blows_into_it_is_refused():
    annulus = sample_mesh("annulus")
    conditions = {"inner": Velocity("x", "y", 0), "outer": Wall(), "ends": Wall()}
    text = one_line(lambda: fem3d.Flow(annulus, conditions, nu=0.1), "net inflow ")
    assert float(text.split()[2]) > 0.1


GOOD = (
    DFG_CASE_TEXT
    + """[report]
forces = { cylinder = { reference_velocity = 0.2, area = 0.041 } }
points = { front = [0.45, 0.2, 0.205], back = [0.55, 0.2, 0.205] }
"""
)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("nu = 1e-3", f"nu = {HUGE}"), "[fluid] nu must be >= 1e-05 and <= 100000 and finite (got 1000"),
        (("nu = 1e-3", "nu = " + "1" * 5000), "not a TOML file (Exceeds the limit (4300 digits)"),
        (("nu = 1e-3", "nu = 1e-3\n[solver]\nmax_steps = " + "9" * 400), "[solver] max_steps must be >= 1 and <="),
        (("nu = 1e-3", "nu = 1e-3\nx = " + "[" * 3000 + "]" * 3000), "not a TOML file (nested too deeply)"),
        (('["y*(0.41-y)", 0, 0]', f"[{HUGE}, 0, 0]"), 'boundary "inflow" velocity u: expected a finite number'),
        (("[0.45, 0.2", "[1e400, 0.2"), "[report] points.front must be finite (got inf)"),
        (("[report]", "[report]\ndifferences = { d = [[1], 'back'] }"), "differences.d must name two points"),
        (
            ("nu = 1e-3", "nu = 1e-3\n" + "".join(f"k{i} = 1\n" for i in range(50000))),
            "unknown key(s) k0, k1, k10, k100 and 49996 more in [fluid] (keys: nu, re)",
        ),
        (("[fluid]", "".join(f"[s{i}]\n" for i in range(5000)) + "[fluid]"), "unknown sections [s0], [s1], [s2], [s3]"),
    ],
)
def test_case_files_with_floods_and_huge_numbers_give_one_short_line(tmp_path, edit, message):
    path = case_file(tmp_path, GOOD.replace(*edit))
    assert one_line(lambda: read_case(path), message).startswith(f"{path}: ")


def test_a_case_file_above_1_mb_is_refused_before_it_is_read(tmp_path):
    path = case_file(tmp_path, GOOD + "# " + "x" * 1_000_000 + "\n")
    message = f"{path}: {os.path.getsize(path)} bytes; a case file is a few kB (at most 1000000)"
    assert os.path.getsize(path) > 1_000_000 and one_line(lambda: read_case(path), message) == message


def test_the_report_is_checked_against_the_mesh_before_the_solve(tmp_path):
    mesh = fem3d.read_mesh(CHANNEL)
    check_report(read_case(case_file(tmp_path, GOOD)), mesh)
    for edit, message in [
        (
            ("forces = { cylinder", "forces = { cylindre"),
            "[report] forces: tag(s) 'cylindre' not in the mesh (its tags: cylinder, inflow, outflow, walls)",
        ),
        (
            (
                "back = [0.55, 0.2, 0.205]",
                "back = [0.55, 0.2, 0.205], far = [3, 0.2, 0.2], in_cylinder = [0.5, 0.2, 0.2]",
            ),
            "[report] points: 'far', 'in_cylinder' lie outside the mesh (it spans (0, 0, 0) to (2.5, 0.41, 0.41))",
        ),
    ]:
        path = case_file(tmp_path, GOOD.replace(*edit))
        assert one_line(lambda: check_report(read_case(path), mesh), message).startswith(f"{path}: ")


def test_the_run_command_refuses_an_all_outflow_case_with_one_line_and_writes_nothing(tmp_path):
    text = GOOD.replace('"wall"', '"outflow"').replace('{ velocity = ["y*(0.41-y)", 0, 0] }', '"outflow"')
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.run", case_file(tmp_path, text), "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("fem3d.run: error: every boundary face is outflow: nothing holds")
    assert not out.exists()
