import numpy as np
import pytest

from fem3d.discretisation.assembly import ReferenceTables, element_matrices_chunk
from fem3d.discretisation.fields import nodal_velocity
from fem3d.discretisation.mesh import box_mesh
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from support import sample_mesh

NU_RE = 50.0


def poly_velocity(x):
    return np.stack([x[..., 1] ** 2, x[..., 2] ** 2, x[..., 0] ** 2], axis=-1)  # divergence free


def poly_pressure(x):
    return x[..., 0] + x[..., 1] * x[..., 2] - 0.3 * x[..., 0] * x[..., 1] * x[..., 2]


def poly_force(xp, x):
    X, Y, Z = x[..., 0], x[..., 1], x[..., 2]
    nu = 1.0 / NU_RE
    return xp.stack(
        [
            2 * Y * Z * Z - 2 * nu + 1 - 0.3 * Y * Z,
            2 * X * X * Z - 2 * nu + Z - 0.3 * X * Z,
            2 * X * Y * Y - 2 * nu + Y - 0.3 * X * Y,
        ],
        axis=-1,
    )


@pytest.mark.parametrize("grading, kind", [(0.0, "picard"), (1.2, "picard"), (1.2, "newton")])
def test_exact_discrete_solution_satisfies_the_equations(backend, grading, kind):
    """Q2 velocity and Q1 pressure that solve Navier-Stokes exactly (with the matching force)
    satisfy the discrete equations to round-off on axis-aligned meshes, where 3-point Gauss
    integrates every term exactly. This checks every block, sign and the consistency of the
    streamline-upwind terms (they multiply the pointwise residual, which vanishes)."""
    mesh = box_mesh(3, 2, 3, lengths=(1.0, 1.5, 0.8), grading=grading)
    problem = FlowProblem.with_boundary_velocity(mesh, NU_RE, poly_velocity, force=poly_force)
    system = NavierStokesSystem(problem, backend)
    x = np.concatenate([poly_velocity(mesh.points).T.ravel(), poly_pressure(mesh.points[mesh.pressure_nodes])])
    state = system.assemble(backend.asarray(x), kind)
    assert state.kind == kind and state.norm < 1e-13
    # the upwind terms are really active here, and a perturbed pressure is not a solution
    x[-5] += 1e-3
    assert system.assemble(backend.asarray(x), kind).norm > 1e-6


def test_galerkin_only_weighting_of_force_would_be_inconsistent(backend):
    """Control for the test above: dropping the streamline part of the force weighting
    leaves a residual, so that test can detect an inconsistent weighting."""
    import fem3d.discretisation.assembly as asm

    mesh = box_mesh(2)
    tables = ReferenceTables.build(backend.xp, 8)
    X = backend.asarray(mesh.geometry)
    u = backend.asarray(poly_velocity(mesh.points)[mesh.cells])
    _, rhs_full, _, _ = element_matrices_chunk(backend.xp, X, u, NU_RE, tables, poly_force)
    orig = asm.upwind_tau
    try:
        asm.upwind_tau = lambda xp, a, J, re, mid: xp.zeros(a.shape[:2] + (27,))
        _, rhs_galerkin, _, _ = element_matrices_chunk(backend.xp, X, u, NU_RE, tables, poly_force)
    finally:
        asm.upwind_tau = orig
    diff = backend.to_numpy(rhs_full - rhs_galerkin)
    assert np.abs(diff).max() > 1e-4


@pytest.mark.parametrize("sigma", [0.0, 25.0])
@pytest.mark.parametrize("re", [30.0, 3000.0])
def test_jacobian_is_the_derivative_of_the_stabilised_residual(backend, re, sigma):
    """The Jacobian element matrices are the exact derivative of the element residual
    F(x) = A(x) x - b(x), upwind weights included (central differences, random velocity and
    pressure on distorted elements, a body force that depends on position); also in a time
    step (sigma > 0, a random history term h), whose tau has its time limit (at a time scale
    other than sigma's, as in a step shorter than the run's)."""
    xp = backend.xp
    mesh = sample_mesh("distorted")
    tables = ReferenceTables.build(xp, 8)
    X = backend.asarray(mesh.geometry[:20])
    rng = np.random.default_rng(7)
    x = backend.asarray(rng.standard_normal((20, 89)))
    dx = backend.asarray(rng.standard_normal((20, 89)))
    history = backend.asarray(rng.standard_normal((20, 27, 3))) if sigma else None
    time = dict(sigma=sigma, history=history, tau_sigma=0.6 * sigma)

    def parts(v):
        return v[:, :81].reshape(20, 3, 27).transpose(0, 2, 1), v[:, 81:]

    def residual(v):
        u, p = parts(v)
        return element_matrices_chunk(xp, X, u, re, tables, poly_force, p, **time)[2]

    eps = 1e-6
    fd = (residual(x + eps * dx) - residual(x - eps * dx)) / (2 * eps)
    u, p = parts(x)
    jac, _, _, _ = element_matrices_chunk(xp, X, u, re, tables, poly_force, p, jacobian=True, **time)
    jd = (jac[:, :, :89] @ dx[..., None])[..., 0]
    assert float(xp.abs(jd - fd).max()) < 1e-8 * float(xp.abs(fd).max())
    picard, _, _, sq = element_matrices_chunk(xp, X, u, re, tables, poly_force, **time)
    assert float(xp.abs((picard[:, :, :89] @ dx[..., None])[..., 0] - fd).max()) > 1e-3 * float(xp.abs(fd).max())
    assert float(xp.abs(sq - (picard * picard).sum(axis=2)).max()) < 1e-14 * float(
        sq.max()
    )  # row norms of the Picard matrix either way
    assert (
        float(xp.abs(element_matrices_chunk(xp, X, u, re, tables, poly_force, p, jacobian=True, **time)[3] - sq).max())
        == 0.0
    )


def test_time_term_at_rest_is_the_mass_matrix(backend):
    """At zero velocity (tau = 0) a time step adds sigma times the consistent mass matrix to
    each velocity block and int N_i h to the load: on the distorted mesh the added blocks are
    symmetric, equal in the three components, sum to sigma times the volume, and a constant h
    loads the volume; pressure rows and columns are unchanged."""
    xp = backend.xp
    mesh = sample_mesh("distorted")
    tables = ReferenceTables.build(xp, 8)
    X = backend.asarray(mesh.geometry)
    E, sigma = mesh.n_elements, 40.0
    u = xp.zeros((E, 27, 3))
    steady = element_matrices_chunk(xp, X, u, 50.0, tables)[0]
    h = xp.zeros((E, 27, 3))
    h[..., 0] = 1.0
    mats, load, _, _ = element_matrices_chunk(xp, X, u, 50.0, tables, sigma=sigma, history=h)
    added = backend.to_numpy(mats - steady)[:, :89, :89]
    mass = added[:, :27, :27] / sigma
    volume = float(np.abs(mesh_volume(mesh)))
    assert np.allclose(mass, mass.transpose(0, 2, 1), rtol=0, atol=1e-15)
    assert np.allclose(added[:, 27:54, 27:54], added[:, :27, :27], rtol=0, atol=1e-15)
    assert abs(mass.sum() - volume) < 1e-12 * volume
    assert np.abs(added[:, 81:, :]).max() == 0 and np.abs(added[:, :, 81:]).max() == 0
    assert np.abs(added[:, :27, 27:81]).max() == 0
    load = backend.to_numpy(load)
    assert abs(load[:, :27].sum() - volume) < 1e-12 * volume and np.abs(load[:, 27:]).max() == 0


def mesh_volume(mesh):
    """The volume of a mesh from its tetrahedral decomposition of each trilinear element."""
    x = mesh.geometry  # (E, 8, 3), vertices in tensor order
    tets = [(0, 1, 3, 7), (0, 3, 2, 7), (0, 2, 6, 7), (0, 6, 4, 7), (0, 4, 5, 7), (0, 5, 1, 7)]
    total = 0.0
    for a, b, c, d in tets:
        total += np.einsum("ei,ei->e", x[:, b] - x[:, a], np.cross(x[:, c] - x[:, a], x[:, d] - x[:, a])).sum() / 6
    return total


def test_upwind_derivatives_match_differences():
    from fem3d.discretisation.element import Q2
    from fem3d.discretisation.upwind import (
        delta_end,
        delta_end_derivative,
        delta_mid,
        delta_mid_derivative,
        tau,
        tau_and_derivative,
    )

    pe = np.array([1e-3, 0.05, 0.149, 0.2, 0.5, 2.0, 10.0, 50.0, 700.0])
    h = 1e-6 * pe
    for f, df in ((delta_mid, delta_mid_derivative), (delta_end, delta_end_derivative)):
        fd = (f(np, pe + h) - f(np, pe - h)) / (2 * h)
        assert np.abs(fd - df(np, pe)).max() < 1e-7 * np.abs(fd).max()
    rng = np.random.default_rng(0)
    a, J = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 3, 3))
    mid = Q2.node_indices == 1
    t, dt = tau_and_derivative(np, a, J, 300.0, mid)
    assert np.array_equal(t, tau(np, a, J, 300.0, mid))
    for c in range(3):
        e = np.zeros(3)
        e[c] = 1e-7
        fd = (tau(np, a + e, J, 300.0, mid) - tau(np, a - e, J, 300.0, mid)) / 2e-7
        assert np.abs(fd - dt[..., c]).max() < 1e-7 * np.abs(fd).max()


@pytest.mark.parametrize("name", ["distorted", "annulus"])
def test_stokes_blocks_are_symmetric_and_divergence_is_minus_gradient_transpose(backend, name):
    mesh = sample_mesh(name)
    xp = backend.xp
    tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
    X = backend.asarray(mesh.geometry)
    mats, _, _, _ = element_matrices_chunk(xp, X, xp.zeros((mesh.n_elements, 27, 3)), 7.0, tables)
    m = backend.to_numpy(mats)[:, :, :89]
    K = m[:, :27, :27]
    assert np.allclose(K, K.transpose(0, 2, 1), atol=1e-14)
    assert np.all(np.linalg.eigvalsh(K)[:, 0] > -1e-13)  # viscous block: positive semidefinite
    assert np.allclose(K.sum(axis=2), 0, atol=1e-13)  # constants are in its kernel
    for d in range(3):
        G = m[:, 27 * d : 27 * d + 27, 81:]
        D = m[:, 81:, 27 * d : 27 * d + 27]
        assert np.allclose(D, -G.transpose(0, 2, 1), atol=1e-14)
    assert np.all(m[:, 81:, 81:] == 0) and np.all(m[:, :27, 27:81] == 0)


def test_frozen_velocity_layout(backend):
    mesh = box_mesh(1)
    x = np.arange(mesh.n_dofs, dtype=float)
    vel = backend.to_numpy(nodal_velocity(backend.xp, backend.asarray(x), mesh.n_nodes))
    assert vel.shape == (27, 3) and vel[5].tolist() == [5.0, 32.0, 59.0]


def test_frozen_test_functions_drop_exactly_the_terms_of_the_strong_residual(backend):
    """The Jacobian with the test functions frozen (``frozen``) is the Jacobian less the
    derivative of the streamline test functions times the strong residual r: where r
    vanishes at every point (the exact polynomial flow on a graded box), the two are equal
    to round-off; the frozen matrices do not depend on the pressure, and the difference is
    linear in a perturbation of the pressure (twice the perturbation, twice the difference)
    and not small."""
    xp = backend.xp
    mesh = box_mesh(3, 2, 3, lengths=(1.0, 1.5, 0.8), grading=1.2)
    tables = ReferenceTables.build(xp, 8)
    X = backend.asarray(mesh.geometry)
    u = backend.asarray(poly_velocity(mesh.points)[mesh.cells])
    p = poly_pressure(mesh.points[mesh.pressure_nodes])[mesh.pressure_cells]
    dp = np.random.default_rng(3).standard_normal(p.shape)

    def matrices(pressure, frozen):
        args = (xp, X, u, NU_RE, tables, poly_force, backend.asarray(pressure))
        return backend.to_numpy(element_matrices_chunk(*args, jacobian=True, frozen=frozen)[0])

    frozen, exact = matrices(p, True), matrices(p, False)
    size = np.abs(exact).max()
    assert np.abs(exact - frozen).max() < 1e-12 * size
    once, twice = (matrices(p + k * dp, False) - frozen for k in (1.0, 2.0))
    assert np.array_equal(matrices(p + dp, True), frozen)
    assert np.abs(once).max() > 1e-3 * size
    assert np.abs(twice - 2.0 * once).max() < 1e-12 * size
