"""The CUDA kernels of the per-point quantities (fem3d.kernels.quadrature) equal their NumPy
references, the array code of fem3d.discretisation.assembly.quadrature_geometry and
fem3d.discretisation.upwind.tau / tau_and_derivative, and the element matrices assembled
on the GPU equal those of NumPy. Differences are measured relative to the norm of the
reference array (the closed forms of the upwind coefficients lose up to three digits
to cancellation just above SERIES_BELOW, where an ulp of exp can differ)."""

import numpy as np
import pytest

from fem3d.discretisation.assembly import ReferenceTables, element_matrices_chunk, quadrature_geometry
from fem3d.discretisation.element import Q2
from fem3d.discretisation.mesh import box_mesh
from fem3d.discretisation.upwind import LARGE, SERIES_BELOW, tau, tau_and_derivative
from gpucfd.backend import cupy_module
from support import sample_mesh

pytestmark = pytest.mark.gpu
MID = Q2.node_indices == 1


@pytest.fixture(scope="module")
def cp():
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    return cupy_module()


def geometry(name):
    """(E, g, 3) geometry nodes: a graded box (affine), the distorted hex8 mesh (trilinear) and
    the refined hex27 annulus (curved triquadratic)."""
    if name == "box":
        return box_mesh(4, 3, 2, grading=1.0).geometry
    return (sample_mesh("annulus").refined(1) if name == "annulus" else sample_mesh(name)).geometry


def relative(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("n_gauss", [3, 2])
@pytest.mark.parametrize("name", ["box", "distorted", "annulus"])
def test_cuda_geometry_equals_the_array_code(cp, name, n_gauss):
    X = geometry(name)
    ref = quadrature_geometry(np, X, ReferenceTables.build(np, X.shape[1], n_gauss))
    got = quadrature_geometry(cp, cp.asarray(X), ReferenceTables.build(cp, X.shape[1], n_gauss))
    assert sorted(got) == sorted(ref)
    for key, r in ref.items():
        g = got[key]
        assert g.shape == r.shape and g.flags.c_contiguous, key
        assert relative(g.get(), r) <= 1e-13, key


def velocities(regime, J, rng):
    """Velocities (E, Q, 3) at points with Jacobians J (zero at every 7th point, along dx/dxi_0
    at every 5th: s_1 = s_2 = 0 where J is diagonal) and the Reynolds number: 'mixed' Pe on both sides
    of SERIES_BELOW up to 1e4, 'series' all Pe < SERIES_BELOW, 'large' Pe beyond LARGE."""
    E, Q = J.shape[:2]
    a = rng.standard_normal((E, Q, 3))
    axis = J[..., :, 0] / np.linalg.norm(J[..., :, 0], axis=-1, keepdims=True)
    a[:, ::5] = axis[:, ::5] * rng.uniform(0.5, 2.0, (E, a[:, ::5].shape[1], 1))
    scale = {"mixed": 10.0 ** rng.uniform(-2, 3, (E, Q, 1)), "series": 1e-4, "large": 1.0}[regime]
    a *= scale
    a[:, ::7] = 0.0
    return a, {"mixed": 40.0, "series": 40.0, "large": 1e15}[regime]


@pytest.mark.parametrize("regime", ["mixed", "series", "large"])
def test_cuda_tau_equals_the_array_code(cp, regime):
    X = np.concatenate([geometry("distorted")[:40], geometry("box")])
    J = quadrature_geometry(np, X, ReferenceTables.build(np, 8))["J"]
    J[40:] *= np.eye(3)  # the box's, diagonal but for round-off: exactly diagonal
    a, re = velocities(regime, J, np.random.default_rng(3))
    pe = re * np.abs(np.einsum("eqi,eqik->eqk", a, J))
    assert {
        "mixed": (pe < SERIES_BELOW).any() and (pe > 1e3).any(),
        "series": (pe < SERIES_BELOW).all(),
        "large": (pe > LARGE).any(),
    }[regime]
    t_ref, dt_ref = tau_and_derivative(np, a, J, re, MID)
    t_got, dt_got = (v.get() for v in tau_and_derivative(cp, cp.asarray(a), cp.asarray(J), re, MID))
    t_only = tau(cp, cp.asarray(a), cp.asarray(J), re, MID).get()
    assert t_got.shape == t_ref.shape and dt_got.shape == dt_ref.shape
    assert np.array_equal(t_only, t_got)
    assert relative(t_got, t_ref) <= 1e-12 and relative(dt_got, dt_ref) <= 1e-12
    still = (a == 0).all(axis=-1)
    assert np.all(t_got[still] == 0) and np.all(dt_got[still] == 0)


def force(xp, x):
    return xp.stack([xp.sin(3 * x[..., 1]), x[..., 0] * x[..., 2], 1.0 + x[..., 0] ** 2], axis=-1)


@pytest.mark.parametrize("kind", ["picard", "newton", "frozen"])
@pytest.mark.parametrize("name", ["distorted", "annulus"])
@pytest.mark.parametrize("case", ["full", "sums", "unforced", "prescribed", "time"])
def test_element_matrices_on_the_gpu_equal_numpy(cp, name, kind, case):
    """The kernel of fem3d.kernels.element_assembly against the array code, for the Picard
    matrices, the Jacobian and the Jacobian with frozen test functions: matrices and sums
    with a pressure and a force; the sums alone; no pressure nor force (no residual); with
    the rows of prescribed unknowns set (every 7th unknown of 100 elements' 500); and in a
    time step (sigma, a history term and tau's time limit)."""
    jacobian = kind != "picard"
    X = geometry(name)[:100]
    rng = np.random.default_rng(5)
    u, p = rng.standard_normal((len(X), 27, 3)), rng.standard_normal((len(X), 8))
    dofs = rng.integers(0, 500, (len(X), 89)).astype(np.int32)
    fixed, valence = np.arange(500) % 7 == 0, rng.integers(1, 9, 500).astype(np.float64)
    options = dict(
        force=None if case == "unforced" else force,
        p_nodes=None if case == "unforced" else p,
        jacobian=jacobian,
        matrices=case != "sums",
        frozen=kind == "frozen",
    )
    if jacobian and case == "unforced":
        options["p_nodes"] = p
    if case == "time":
        options.update(sigma=60.0, history=rng.standard_normal((len(X), 27, 3)), tau_sigma=45.0)
    prescribed = (dofs, fixed, valence) if case == "prescribed" else None
    ref = element_matrices_chunk(
        np, X, u, 300.0, ReferenceTables.build(np, X.shape[1]), prescribed=prescribed, **options
    )
    on_gpu = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in options.items()}
    got = element_matrices_chunk(
        cp,
        cp.asarray(X),
        cp.asarray(u),
        300.0,
        ReferenceTables.build(cp, X.shape[1]),
        prescribed=None if prescribed is None else tuple(cp.asarray(v) for v in prescribed),
        **on_gpu,
    )
    assert (
        [g is None for g in got]
        == [r is None for r in ref]
        == [case == "sums", False, case == "unforced" and not jacobian, False]
    )
    for g, r in zip(got, ref):
        if r is not None:
            assert g.shape == r.shape
            assert relative(g.get(), r) <= 1e-12 if r.any() else not g.any()  # no force: zero loads
    if case == "prescribed":
        e, k = np.nonzero(fixed[dofs])
        assert len(e) > 1000 and np.array_equal(got[0].get()[e, k, k], 1.0 / valence[dofs[e, k]])
