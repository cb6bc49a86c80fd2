"""Fluxes through tagged boundaries and planes (fem3d.problems.quantities, on the surface rules of
fem3d.discretisation.surfaces), the delivered flow rate of velocity boundaries, and
[report] fluxes of the case file."""

import numpy as np
import pytest

from gpucfd.backend import get_backend
from gpucfd.errors import InputError
from fem3d.discretisation.mesh import box_mesh
from fem3d.discretisation.surfaces import plane_rule
from fem3d.parallel.comm import launched_ranks
from fem3d.parallel.partition import partition_elements, submesh
from fem3d.problems.boundary import Outflow, Slip, Velocity, Wall
from fem3d.problems.case import check_report, read_case
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.problems.quantities import Plane, boundary_flux, flow_rates, flux, fluxes, parse_plane, plane_flux
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
from support import sample_mesh, twisted_mesh


def field(mesh, u):
    """The host vector [u | v | w | 0] of the velocity u(x, y, z) -> (u, v, w) at the Q2 nodes."""
    return np.concatenate([*u(*mesh.points.T), np.zeros(mesh.n_pressure)])


def polynomial(x, y, z):
    """Triquadratic: the Q2 space holds it exactly; div = 2 x y (1 - y) + 2 y + x y."""
    return x**2 * y * (1 - y) + z, x * z + y**2, x * y * z


@pytest.fixture(scope="module")
def box():
    """[0, 2] x [0, 1] x [0, 0.5], 3 x 2 x 2 elements graded toward the walls (vertices at y = 0.5)."""
    return box_mesh(3, 2, 2, lengths=(2.0, 1.0, 0.5), grading=0.5)


def test_the_flux_of_a_q2_field_is_exact_through_faces_and_planes(box):
    x = field(box, polynomial)
    inner = box.box_vertices[0][1]  # a plane along element faces: each side counts half
    for c in (0.0, 0.3, inner, 2.0):  # the x = 2 plane is the face x1: its Gauss points count once
        assert plane_flux(box, x, 0, c) == pytest.approx(c**2 / 12 + 0.125, rel=1e-14, abs=1e-15)
    assert flux(box, x, "y=0.5") == pytest.approx(0.25 + 0.25, rel=1e-14)
    assert flux(box, x, " z = 0.1 ") == pytest.approx(0.1, rel=1e-14)
    assert boundary_flux(box, x, ["x0"]) == pytest.approx(-0.125, rel=1e-14)  # outward: -x
    assert boundary_flux(box, x, ["x1"]) == pytest.approx(4 / 12 + 0.125, rel=1e-14)
    assert flux(box, x, "y1") == pytest.approx(0.25 + 1.0, rel=1e-14)
    everywhere = boundary_flux(box, x, list(box.tag_names))  # = the integral of div u (divergence theorem)
    assert everywhere == pytest.approx(1 / 3 + 1 + 0.5, rel=1e-14)
    assert fluxes(box, x, {"in": "x0", "mid": "x=1"}) == pytest.approx({"in": -0.125, "mid": 1 / 12 + 0.125})


def test_a_rank_part_counts_each_face_and_plane_piece_once():
    """The sums over parts (as ranks sum them) equal the whole's, also for a plane along the
    faces between two parts."""
    mesh = box_mesh(4, 2, 2, lengths=(2.0, 1.0, 0.5))
    x = field(mesh, polynomial)
    n = mesh.n_nodes
    part = partition_elements(mesh, 2)  # slabs: the interface is the plane x = 1
    totals = np.zeros(3)
    for rank in range(2):
        local, nodes, pressure = submesh(mesh, np.flatnonzero(part == rank))
        x_local = x[np.concatenate([nodes, nodes + n, nodes + 2 * n, pressure + 3 * n])]
        totals += [plane_flux(local, x_local, 0, 1.0), plane_flux(local, x_local, 0, 0.7), flux(local, x_local, "x1")]
    assert totals == pytest.approx([1 / 12 + 0.125, 0.49 / 12 + 0.125, 4 / 12 + 0.125], rel=1e-14)


@pytest.mark.parametrize("c", [0.1, 0.5, 0.77])
def test_plane_cuts_of_tilted_elements_have_the_cross_section_area(c):
    """Jittered trilinear elements of the unit cube, in all orientations: cuts leave elements
    sideways, and their areas (the flux of u = e_x) add up to the cube's section, 1."""
    mesh = twisted_mesh(4, jitter=0.2)
    _, _, weights = plane_rule(mesh, 0, c)
    assert abs(weights.sum() - 1.0) < 3e-6
    assert flux(mesh, field(mesh, lambda x, y, z: (1 + 0 * x, y, 0 * z)), f"x={c}") == pytest.approx(1.0, abs=3e-6)


def test_plane_cuts_of_curved_elements():
    """The annulus 0.5 < r < 1, 0 < z < 0.5 (64 triquadratic elements): the section x = c has
    the width of the exact circles within the geometry's own error (the mesh's circles are
    quadratic arcs between nodes), and x = 0 lies along element faces."""
    mesh = sample_mesh("annulus")
    for c, tol in ((0.0, 1e-13), (0.2, 1e-4), (0.7, 2e-3)):
        exact = (np.sqrt(1 - c * c) - np.sqrt(max(0.25 - c * c, 0.0))) * 2 * 0.5
        assert plane_rule(mesh, 0, c)[2].sum() == pytest.approx(exact, rel=tol)


RE = 10.0


def solved(problem):
    system = NavierStokesSystem(problem, get_backend("cpu"))
    linear = make_linear_solver(LinearOptions(solver="paper").for_mesh(problem.mesh))
    result = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-10)).solve()
    assert result.converged, result.reason
    return result.x


def test_what_enters_a_solved_channel_leaves_it():
    """A plug inflow into a duct with walls and slip sides, solved: the outflow carries the
    inflow's rate to the solver tolerance, the rate the inflow delivers (its edge nodes on
    the walls are zero) and no more; inside, a plane carries it up to the discretisation."""
    mesh = box_mesh(3, 2, 2, lengths=(2.0, 1.0, 0.5))
    conditions = {"x0": Velocity(1, 0, 0), "x1": Outflow(), "y0": Wall(), "y1": Wall(), "z0": Slip(), "z1": Slip()}
    problem = FlowProblem.with_conditions(mesh, RE, conditions)
    x = solved(problem)
    rates = flow_rates(problem, conditions)
    assert list(rates) == ["x0"] and rates["x0"]["nominal"] == pytest.approx(-0.5, rel=1e-14)
    assert rates["x0"]["delivered"] == pytest.approx(-0.5 * (1 - 1 / 6), rel=1e-14)  # walls took y = 0, 1
    inflow, outflow = boundary_flux(mesh, x, ["x0"]), boundary_flux(mesh, x, ["x1"])
    assert inflow == pytest.approx(rates["x0"]["delivered"], rel=1e-12)
    assert abs(inflow + outflow) < 1e-9 and abs(boundary_flux(mesh, x, ["y0", "y1", "z0", "z1"])) < 1e-12
    assert plane_flux(mesh, x, 0, 1.0) == pytest.approx(outflow, rel=0.01)


@pytest.mark.parametrize("n", [(2, 2), (3, 2)])
def test_a_plug_inflow_delivers_less_than_nominal_where_walls_take_its_edges(n):
    """Walls on all four sides of the inflow face take its edge nodes: the Q2 plug is 1 inside
    and falls to 0 in the edge elements, delivering (1 - h_y/3)(1 - h_z/3) of its area (h as
    fractions of the sides); a parabolic profile vanishing there is delivered whole."""
    ny, nz = n
    mesh = box_mesh(2, ny, nz, lengths=(2.0, 1.0, 0.5))
    walls = {tag: Wall() for tag in ("y0", "y1", "z0", "z1")}
    for inflow, nominal, delivered in (
        (Velocity(1, 0, 0), -0.5, -0.5 * (1 - 1 / (3 * ny)) * (1 - 1 / (3 * nz))),
        (Velocity("64*y*(1-y)*z*(0.5-z)", 0, 0), -2 / 9, -2 / 9),
    ):
        conditions = {"x0": inflow, "x1": "outflow", **walls}
        rates = flow_rates(FlowProblem.with_conditions(mesh, RE, conditions), conditions)
        assert rates["x0"]["nominal"] == pytest.approx(nominal, rel=1e-14)
        assert rates["x0"]["delivered"] == pytest.approx(delivered, rel=1e-14)


def test_plane_spellings():
    assert parse_plane("x=1.25") == Plane(0, 1.25) and parse_plane(" z = -3e-1 ") == Plane(2, -0.3)
    assert str(Plane(1, 0.5)) == "y=0.5"
    for bad in ("x=", "w=1", "x=1=2", "x=nan", "x=1e999", "x 1", 1.25, "outflow"):
        assert parse_plane(bad) is None


@pytest.mark.parametrize(
    "through, message",
    [
        (
            "outlet",
            r"^through must name a boundary tag \(x0, x1, y0, y1, z0, z1\) or a plane .* \(got 'outlet'\)$",
        ),
        ("x=abc", r"^through must name a boundary tag .*\(got 'x=abc'\)$"),
        ("x=2.5", r"^through: the plane x=2.5 misses the mesh \(x from 0 to 2\)$"),
    ],
)
def test_a_bad_flux_target_is_one_line(box, through, message):
    with pytest.raises(InputError, match=message):
        flux(box, field(box, polynomial), through)


CASE = """
[mesh]
file = "box.msh"
[fluid]
re = 10
[boundary]
x0 = { velocity = [1, 0, 0] }
x1 = "outflow"
y0 = "wall"
[report]
fluxes = FLUXES
"""


def test_report_fluxes_in_the_case_file(tmp_path, box):
    path = tmp_path / "case.toml"
    path.write_text(CASE.replace("FLUXES", '{ out = "x1", mid = "x = 1.25" }'))
    case = read_case(str(path))
    assert case.fluxes == {"out": "x1", "mid": "x = 1.25"}
    check_report(case, box)
    for spelled, message in (
        (
            '{ out = "outlet" }',
            r"\[report\] fluxes.out must name a tag of \[boundary\] \(x0, x1, y0\) or a plane",
        ),
        ('{ out = "q=1" }', r"\[report\] fluxes.out must name a tag .*\(got 'q=1'\)$"),
        ("{ out = 1.25 }", r"\[report\] fluxes.out must name .*\(got 1.25\)$"),
        ('"x1"', r"\[report\] fluxes must be a table"),
    ):
        path.write_text(CASE.replace("FLUXES", spelled))
        with pytest.raises(InputError, match=message):
            read_case(str(path))
    path.write_text(CASE.replace("FLUXES", '{ far = "y=3" }'))
    with pytest.raises(InputError, match=r"case.toml: \[report\] fluxes.far: the plane y=3 misses the mesh \(y from 0"):
        check_report(read_case(str(path)), box)


@pytest.mark.mpi
def test_fluxes_on_ranks_equal_the_single_process_ones():
    from fem3d.parallel.comm import setup
    from fem3d.parallel.partition import distribute

    if launched_ranks() < 2:
        pytest.skip("run under mpiexec")
    backend, comm = setup("cpu", "auto")
    mesh = sample_mesh("annulus")  # curved elements cut by METIS: planes along faces between ranks' elements
    x = field(mesh, lambda x, y, z: (x + y * z, y + x * x, 1 + x * y))
    part = distribute(mesh, comm, backend)
    x_local = x[part.dist.gdofs]
    targets = {"outer": "outer", "mid": "x=0.2", "along": "y=0", "low": "z=0.25"}
    assert fluxes(part.mesh, x_local, targets, comm) == pytest.approx(fluxes(mesh, x, targets), rel=1e-12)
