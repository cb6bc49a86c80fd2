"""The vorticity–stream-function core: operators against exact fields and assembled sparse
systems, fixed nodes (an obstacle), line layouts, every line solver alike, divergence."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from gpucfd.backend import get_backend
from gpucfd.errors import ConvergenceError, InputError
from tridiag.cases.flow_analysis import minimum, sample
from tridiag.cases.line_solver import LAYOUTS, LIBRARY, ITERATIVE, LineSystems, resolve_solver, storage_transposed
from tridiag.cases.vorticity import Boundary, Grid, laplacian, velocity, wall_vorticity
from tridiag.cases.peaceman_rachford import parameters, spectrum
from tridiag.cases.vorticity_solver import VorticitySolver


def box_fixed(grid, body=None):
    """Fixed mask: the box edge, plus body = (j0, j1, i0, i1) node ranges (inclusive) of a block."""
    fixed = np.ones(grid.shape, dtype=bool)
    fixed[1:-1, 1:-1] = False
    if body is not None:
        j0, j1, i0, i1 = body
        fixed[j0 : j1 + 1, i0 : i1 + 1] = True
    return fixed


def obstacle_case(backend, solver="thomas", n=(15, 12), dt=0.05, re=50.0, layout="auto"):
    """A lid-driven box of 15 × 12 cells with a 3 × 2-cell block inside; body ψ = 0.01."""
    grid = Grid.box(1.2, 1.0, *n)
    body = (4, 6, 5, 8)
    fixed = box_fixed(grid, body)
    lid = np.zeros(grid.shape)
    lid[-1] = 1.0
    boundary = Boundary.create(backend.xp, grid, fixed, wall_u=lid)
    psi = np.zeros(grid.shape)
    psi[body[0] : body[1] + 1, body[2] : body[3] + 1] = 0.01
    vs = VorticitySolver(backend, boundary, re, dt, solver=solver, psi_sweeps=2, layout=layout)
    return vs, backend.asarray(psi), backend.xp.zeros(grid.shape), fixed, body


# --- operators ------------------------------------------------------------------------------

SIDES = {  # side: (distance s to the wall, tangential coordinate t, dψ/ds -> (u_wall, v_wall) factor)
    "bottom": (lambda x, y: y, lambda x, y: x, (1, 0)),
    "top": (lambda x, y: 1 - y, lambda x, y: x, (-1, 0)),
    "left": (lambda x, y: x, lambda x, y: y, (0, -1)),
    "right": (lambda x, y: 1 - x, lambda x, y: y, (0, 1)),
}


def wall_error(side, n, cubic):
    """max |ω_Thom − ω_exact| on one wall for ψ = g(t) (s + s² [+ s³]), with ψ_w = 0, ∂ψ/∂s = g."""
    dist, tang, (fu, fv) = SIDES[side]
    grid = Grid.box(1.0, 1.0, n, n)
    x, y = np.meshgrid(*grid.coordinates())
    s, t = dist(x, y), tang(x, y)
    g = np.sin(2 * t + 0.3)
    psi = g * (s + s**2 + (s**3 if cubic else 0))
    wall = np.isclose(s, 0) & (t > 0) & (t < 1)
    boundary = Boundary.create(np, grid, box_fixed(grid), wall_u=fu * g, wall_v=fv * g)
    omega = np.zeros(grid.shape)
    wall_vorticity(psi, omega, boundary)
    exact = -2 * g  # −(ψ_ss + ψ_tt) at s = 0, where ψ_tt = 0
    return np.abs(omega[wall] - exact[wall]).max()


@pytest.mark.parametrize("side", SIDES)
def test_thom_wall_vorticity_exact_for_quadratic_first_order_for_cubic(side):
    assert wall_error(side, 16, cubic=False) < 1e-11
    e1, e2 = wall_error(side, 16, cubic=True), wall_error(side, 32, cubic=True)
    assert 0.95 < np.log2(e1 / e2) < 1.05  # Thom's formula: O(h) at the wall (−h ψ_sss / 3)


def test_convex_body_corner_takes_the_mean_of_its_two_walls():
    grid = Grid.box(1.0, 1.0, 10, 10)
    fixed = box_fixed(grid, (4, 6, 4, 6))
    psi = np.random.default_rng(0).uniform(size=grid.shape)
    boundary = Boundary.create(np, grid, fixed)
    assert {w.direction for w in boundary.walls} == {"+x", "-x", "+y", "-y"}
    omega = np.zeros(grid.shape)
    wall_vorticity(psi, omega, boundary)
    h2 = grid.hx**2
    corner = -(psi[6, 7] - psi[6, 6]) / h2 - (psi[7, 6] - psi[6, 6]) / h2  # mean of −2(ψ_f − ψ_w)/h²
    assert omega[6, 6] == pytest.approx(corner, rel=1e-12)
    assert omega[5, 6] == pytest.approx(-2 * (psi[5, 7] - psi[5, 6]) / h2, rel=1e-12)
    assert omega[5, 5] == 0 and omega[0, 0] == 0  # body interior and box corners: not walls, untouched


def test_velocity_exact_for_quadratic_stream_function():
    grid = Grid.box(2.0, 1.0, 8, 5)
    x, y = np.meshgrid(*grid.coordinates())
    psi = x**2 + 3 * x * y - 2 * y**2 + x
    u, v = velocity(psi, grid)
    assert np.allclose(u, 3 * x - 4 * y, atol=1e-12) and np.allclose(v, -(2 * x + 3 * y + 1), atol=1e-12)
    assert np.allclose(laplacian(psi, grid), -2.0, atol=1e-10)


def test_box_edge_must_be_fixed():
    grid = Grid.box(1.0, 1.0, 4, 4)
    fixed = box_fixed(grid)
    fixed[0, 2] = False
    with pytest.raises(InputError, match="every node on the box edge must be fixed"):
        Boundary.create(np, grid, fixed)


def test_sample_is_exact_for_cubics_and_minimum_for_a_bowl():
    grid = Grid.box(1.0, 2.0, 7, 9, x0=-0.5)
    x, y = np.meshgrid(*grid.coordinates())
    f = x**3 - 2 * x * y**2 + y**3 + 1
    px, py = np.array([-0.43, 0.0, 0.31, 0.5]), np.array([0.05, 1.0, 1.97, 2.0])
    assert np.allclose(sample(f, grid, px, py), px**3 - 2 * px * py**2 + py**3 + 1, atol=1e-12)
    bowl = (x - 0.13) ** 2 + 2 * (y - 1.21) ** 2 - 0.4
    m = minimum(bowl, grid)
    assert m["x"] == pytest.approx(0.13) and m["y"] == pytest.approx(1.21) and m["value"] == pytest.approx(-0.4)


# --- line systems and solves ------------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("solver", ["thomas", "pta"])
def test_line_layouts_solve_rows_and_columns(solver, layout):
    rng = np.random.default_rng(1)
    shape = (6, 9)
    choice = resolve_solver(solver, False, 9, True, layout)
    assert choice.layouts == LAYOUTS[layout]
    for along in "xy":
        lines = LineSystems.create(np, shape, np.float64, along, choice)
        transposed = lines.storage[0].shape != shape
        assert transposed == storage_transposed(along, choice.layouts)
        assert transposed == ((along == "x") == (choice.layouts["xy".index(along)] == "interleaved"))
        lines.a[...], lines.c[...], lines.d[...] = (rng.uniform(-1, 1, shape) for _ in range(3))
        lines.b[...] = 3 + rng.uniform(size=shape)
        x = lines.solve()
        axis = 1 if along == "x" else 0
        a, b, c, d, xx = (np.moveaxis(v, axis, -1) for v in (lines.a, lines.b, lines.c, lines.d, x))
        r = b * xx - d
        r[..., 1:] += a[..., 1:] * xx[..., :-1]
        r[..., :-1] += c[..., :-1] * xx[..., 1:]
        assert np.abs(r).max() < 1e-13


def assembled_laplacian(grid, fixed):
    """Sparse five-point −∇² with identity rows at fixed nodes (node j * nx + i)."""
    ny, nx = grid.shape
    n = nx * ny
    idx = np.arange(n).reshape(grid.shape)
    rows, cols, vals = [], [], []
    for j in range(ny):
        for i in range(nx):
            k = idx[j, i]
            if fixed[j, i]:
                rows.append(k), cols.append(k), vals.append(1.0)
                continue
            for dj, di, h in ((0, 1, grid.hx), (0, -1, grid.hx), (1, 0, grid.hy), (-1, 0, grid.hy)):
                rows.append(k), cols.append(idx[j + dj, i + di]), vals.append(-1 / h**2)
            rows.append(k), cols.append(k), vals.append(2 / grid.hx**2 + 2 / grid.hy**2)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def test_poisson_sweeps_converge_to_the_sparse_solution(backend):
    vs, psi, _, fixed, _ = obstacle_case(backend)
    rng = np.random.default_rng(2)
    omega_h = rng.uniform(-1, 1, vs.grid.shape)
    psi_h = backend.to_numpy(psi)
    psi_h[fixed] = rng.uniform(-0.1, 0.1, fixed.sum())  # any fixed values are kept
    rhs = np.where(fixed, psi_h, omega_h).ravel()
    exact = spla.spsolve(assembled_laplacian(vs.grid, fixed), rhs).reshape(vs.grid.shape)
    psi, omega = backend.asarray(psi_h), backend.asarray(omega_h)
    for _ in range(20 * len(vs.rho)):
        vs.poisson_sweep(psi, omega)
    assert np.abs(backend.to_numpy(psi) - exact).max() < 1e-10 * np.abs(exact).max()
    assert np.all(backend.to_numpy(psi)[fixed] == psi_h[fixed])


def test_poisson_parameters_span_the_spectrum():
    grid = Grid.box(1.0, 1.0, 32, 32)
    rho = parameters(*spectrum(grid.shape, grid.hx, grid.hy), 6)
    assert len(rho) == 6 and all(a > b for a, b in zip(rho, rho[1:]))
    assert np.pi**2 < rho[-1] < rho[0] < 4 * 32**2


def test_transport_step_equals_assembled_peaceman_rachford(backend):
    vs, psi, omega, fixed, _ = obstacle_case(backend, dt=0.07, re=30.0)
    g = vs.grid
    rng = np.random.default_rng(3)
    psi_h = backend.to_numpy(psi) + np.where(fixed, 0, rng.uniform(-0.05, 0.05, g.shape))
    omega_h = rng.uniform(-1, 1, g.shape)
    # assembled L_x, L_y (zero rows at fixed nodes), u, v central differences of ψ
    ny, nx = g.shape
    n = nx * ny
    idx = np.arange(n).reshape(g.shape)
    lx, ly = sp.lil_matrix((n, n)), sp.lil_matrix((n, n))
    for j in range(1, ny - 1):
        for i in range(1, nx - 1):
            if fixed[j, i]:
                continue
            k = idx[j, i]
            u = (psi_h[j + 1, i] - psi_h[j - 1, i]) / (2 * g.hy)
            v = -(psi_h[j, i + 1] - psi_h[j, i - 1]) / (2 * g.hx)
            for mat, speed, h, (dj, di) in ((lx, u, g.hx, (0, 1)), (ly, v, g.hy, (1, 0))):
                mat[k, idx[j + dj, i + di]] += -speed / (2 * h) + 1 / (vs.re * h**2)
                mat[k, idx[j - dj, i - di]] += speed / (2 * h) + 1 / (vs.re * h**2)
                mat[k, k] += -2 / (vs.re * h**2)
    eye = sp.identity(n, format="csr")
    half = vs.dt / 2
    lx, ly = lx.tocsr(), ly.tocsr()
    star = spla.spsolve((eye - half * lx).tocsc(), (eye + half * ly) @ omega_h.ravel())
    expected = spla.spsolve((eye - half * ly).tocsc(), (eye + half * lx) @ star).reshape(g.shape)
    omega = backend.asarray(omega_h)
    vs.transport(backend.asarray(psi_h), omega)
    assert np.abs(backend.to_numpy(omega) - expected).max() < 1e-12
    assert np.all(backend.to_numpy(omega)[fixed] == omega_h[fixed])


def test_obstacle_is_inert_and_its_walls_follow_thom(backend):
    vs, psi, omega, fixed, (j0, j1, i0, i1) = obstacle_case(backend)
    vs.march(psi, omega, 60, check_every=30)
    wall_vorticity(psi, omega, vs.boundary)
    psi_h, omega_h = backend.to_numpy(psi), backend.to_numpy(omega)
    assert np.all(psi_h[j0 : j1 + 1, i0 : i1 + 1] == 0.01)  # fixed ψ kept on and inside the body
    assert np.all(omega_h[j0 + 1 : j1, i0 + 1 : i1] == 0)  # the body's interior is inert
    hx2, hy2 = vs.grid.hx**2, vs.grid.hy**2
    bottom = -2 * (psi_h[j0 - 1, i0 + 1 : i1] - 0.01) / hy2  # faces: fluid at -y, +x
    right = -2 * (psi_h[j0 + 1 : j1, i1 + 1] - 0.01) / hx2
    assert np.allclose(omega_h[j0, i0 + 1 : i1], bottom, rtol=1e-12) and np.allclose(
        omega_h[j0 + 1 : j1, i1], right, rtol=1e-12
    )
    assert np.abs(bottom).max() > 0.01 and np.isfinite(omega_h).all()


@pytest.mark.parametrize(
    "solver, layout",
    [(s, lay) for s in LIBRARY if s not in ("thomas", *ITERATIVE) for lay in LAYOUTS] + [("fused", "auto")],
)
def test_every_line_solver_gives_the_thomas_answer(backend, solver, layout):
    if solver == "fused" and not backend.is_gpu:
        pytest.skip("the fused sweeps run on the GPU (tests/test_vorticity_sweeps.py checks the CPU refusal)")
    results = []
    for name, lay in (("thomas", "auto"), (solver, layout)):
        vs, psi, omega, _, _ = obstacle_case(backend, solver=name, layout=lay)
        vs.march(psi, omega, 40, check_every=40)
        results.append(np.concatenate([backend.to_numpy(psi).ravel(), backend.to_numpy(omega).ravel()]))
    scale = np.abs(results[0]).max()
    assert np.abs(results[1] - results[0]).max() < 1e-10 * scale


def test_divergence_names_the_time_step_and_the_cfl_limit():
    vs, psi, omega, _, _ = obstacle_case(get_backend("cpu"), dt=20.0, re=5000.0)
    with pytest.raises(ConvergenceError, match=r"diverged at step \d+ .*Δt = 20.*CFL number") as err:
        vs.march(psi, omega, 5000, check_every=10)
    assert err.value.reason == "diverged"


def test_open_boundary_nodes_are_not_walls_when_solid_is_given():
    grid = Grid.box(2.0, 1.0, 12, 6)
    fixed = box_fixed(grid)
    solid = np.zeros(grid.shape, dtype=bool)
    solid[0] = solid[-1] = True  # channel walls; x = 0 and x = 2 columns are open (inflow, outflow)
    everything = Boundary.create(np, grid, fixed)
    channel = Boundary.create(np, grid, fixed, solid=solid)
    assert {w.direction for w in everything.walls} == {"+x", "-x", "+y", "-y"}
    assert {w.direction for w in channel.walls} == {"+y", "-y"} and len(channel.wall_nodes) == 2 * 11
    omega = np.full(grid.shape, 7.0)
    wall_vorticity(np.zeros(grid.shape), omega, channel)
    assert np.all(omega[1:-1, 0] == 7.0) and np.all(omega[0, 1:-1] == 0.0)
