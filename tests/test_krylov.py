import numpy as np
import pytest
import scipy.sparse.linalg as spla

from fem3d.kernels import cg, ebe
from fem3d.krylov import normal_pcg
from fem3d.mesh import box_mesh
from fem3d.operators import ElementOperator


def random_operator(backend, seed=0, n=2):
    """Element operator with random, diagonally weighted element matrices (nonsingular A)."""
    mesh = box_mesh(n)
    op = ElementOperator(backend, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs)
    rng = np.random.default_rng(seed)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, ebe.LD)) * 0.1
    mats[:, np.arange(ebe.NL), np.arange(ebe.NL)] += 2.0 + rng.random((mesh.n_elements, ebe.NL))
    op.mats[...] = backend.asarray(mats)
    return op


def test_solves_like_a_direct_solver(backend):
    op = random_operator(backend)
    A = op.to_scipy().tocsc()
    rng = np.random.default_rng(1)
    b = rng.standard_normal(op.n)
    x_ref = spla.spsolve(A, b)
    x = backend.xp.zeros(op.n)
    inv_diag = 1.0 / op.normal_diagonal()
    info = normal_pcg(op, backend.asarray(b), x, inv_diag, tol=1e-13, max_iter=5000, check_every=3)
    assert info.converged and info.iterations % 3 == 0 and info.iterations > 3
    assert np.linalg.norm(backend.to_numpy(x) - x_ref) < 1e-10 * np.linalg.norm(x_ref)
    assert info.true_relres < 1e-12 and info.residual < 1e-11
    assert info.history[0][0] == 0 and info.history[-1] == (info.iterations, info.relres)


def test_reasons_for_stopping(backend):
    xp = backend.xp
    op = random_operator(backend)
    b = backend.asarray(np.random.default_rng(2).standard_normal(op.n))
    inv_diag = 1.0 / op.normal_diagonal()
    info = normal_pcg(op, b, xp.zeros(op.n), inv_diag, tol=1e-30, max_iter=4)
    assert info.reason == "max_iterations" and info.iterations == 4 and not info.converged
    bad = b.copy()
    bad[7] = np.nan
    assert normal_pcg(op, bad, xp.zeros(op.n), inv_diag).reason == "nan"
    x = xp.ones(op.n)
    info = normal_pcg(op, xp.zeros(op.n), x, inv_diag)
    assert info.converged and float(abs(x).max()) == 0.0
    indefinite = inv_diag * backend.asarray(np.where(np.arange(op.n) % 2, -1.0, 1.0))
    assert normal_pcg(op, b, xp.zeros(op.n), indefinite, tol=1e-14, max_iter=200).reason == "breakdown"


def test_warm_start_from_the_solution_needs_no_iteration(backend):
    op = random_operator(backend, n=1)
    x_true = backend.asarray(np.random.default_rng(5).standard_normal(op.n))
    b = op.matvec(x_true, backend.xp.empty(op.n))
    info = normal_pcg(op, b, x_true.copy(), 1.0 / op.normal_diagonal(), tol=1e-10)
    assert info.converged and info.iterations == 0


@pytest.mark.gpu
def test_cuda_vector_kernels_match_numpy_reference():
    from fem3d.backend import cupy_module, get_backend

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    gpu = get_backend("gpu")
    cp = gpu.xp
    rng = np.random.default_rng(6)
    n = 300_001  # several blocks and a ragged tail
    r, z, s, x, p, q = (rng.standard_normal(n) for _ in range(6))
    minv = rng.random(n)
    w = (rng.random(n) < 0.8).astype(float)  # owned entries of a rank
    dots_gpu, update_gpu = cg.for_backend(gpu)
    for first, allreduce in ((1.0, None), (0.0, None), (0.0, lambda buf: buf.__imul__(3.0))):
        sc_h = np.array([0, 0, 0, 0.7, 1.3, 0, 0, first, 0])
        sc_d = cp.asarray(sc_h)
        dev = [cp.asarray(v) for v in (x, r, z, p, q, s)]
        cg.dots_numpy(r, z, s, w, sc_h, allreduce)
        dots_gpu(dev[1], dev[2], dev[5], cp.asarray(w), sc_d, allreduce)
        assert np.allclose(sc_d.get(), sc_h, rtol=1e-12, atol=0)
        assert np.isclose(sc_h[0], (3.0 if allreduce else 1.0) * (w * r) @ z, rtol=1e-12)
        host = [v.copy() for v in (x, r, z, p, q, s)]
        cg.update_numpy(*host, minv, sc_h)
        update_gpu(*dev, cp.asarray(minv), sc_d)
        for h, d in zip(host, dev):
            assert np.allclose(d.get(), h, rtol=1e-13, atol=1e-13)
