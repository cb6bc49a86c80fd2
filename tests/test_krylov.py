import math

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from fem3d.kernels import cg, ebe, hessenberg, vectors
from gpucfd.backend import get_backend
from fem3d.solvers.krylov import BASIS_START, FGMRES, NormalEquationsCG, NormalJacobi, gmres_steps
from fem3d.discretisation.mesh import box_mesh
from fem3d.solvers.operators import ElementOperator


def random_operator(backend, seed=0, n=2):
    """Element operator with random, diagonally weighted element matrices (nonsingular A)."""
    mesh = box_mesh(n)
    op = ElementOperator(backend, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs)
    rng = np.random.default_rng(seed)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, ebe.LD)) * 0.1
    mats[:, np.arange(ebe.NL), np.arange(ebe.NL)] += 2.0 + rng.random((mesh.n_elements, ebe.NL))
    op.mats[...] = backend.asarray(mats)
    return op


def cg_solve(op, b, x, inv_diag=None, **options):
    precond = NormalJacobi()
    precond.setup(op)
    if inv_diag is not None:
        precond.inv_diag = inv_diag
    return NormalEquationsCG(**options).solve(op, b, x, precond)


def test_normal_cg_solves_like_a_direct_solver(backend):
    op = random_operator(backend)
    A = op.to_scipy().tocsc()
    rng = np.random.default_rng(1)
    b = rng.standard_normal(op.n)
    x_ref = spla.spsolve(A, b)
    x = backend.xp.zeros(op.n)
    info = cg_solve(op, backend.asarray(b), x, rtol=1e-13, max_iterations=5000, check_every=3)
    assert info.converged and info.iterations % 3 == 0 and info.iterations > 3
    assert np.linalg.norm(backend.to_numpy(x) - x_ref) < 1e-10 * np.linalg.norm(x_ref)
    assert info.history[0][0] == 0 and info.history[-1] == (info.iterations, info.relres) and info.relres <= 1e-13


def test_normal_cg_reasons_for_stopping(backend):
    xp = backend.xp
    op = random_operator(backend)
    b = backend.asarray(np.random.default_rng(2).standard_normal(op.n))
    info = cg_solve(op, b, xp.zeros(op.n), rtol=1e-30, max_iterations=4)
    assert info.reason == "max_iterations" and info.iterations == 4 and not info.converged
    bad = b.copy()
    bad[7] = np.nan
    assert cg_solve(op, bad, xp.zeros(op.n)).reason == "nan"
    x = xp.ones(op.n)
    info = cg_solve(op, xp.zeros(op.n), x)
    assert info.converged and float(abs(x).max()) == 0.0
    precond = NormalJacobi()
    precond.setup(op)
    indefinite = precond.inv_diag * backend.asarray(np.where(np.arange(op.n) % 2, -1.0, 1.0))
    assert cg_solve(op, b, xp.zeros(op.n), indefinite, rtol=1e-14, max_iterations=200).reason == "breakdown"


def test_normal_cg_at_round_off_restarts_and_keeps_its_best_accuracy(backend):
    op = random_operator(backend)
    A = op.to_scipy().tocsc()
    b = np.random.default_rng(3).standard_normal(op.n)
    x_ref = spla.spsolve(A, b)
    x = backend.xp.zeros(op.n)
    info = cg_solve(op, backend.asarray(b), x, rtol=1e-30, max_iterations=3000, check_every=7)
    assert info.reason in ("breakdown", "stagnated") and info.iterations < 3000 and info.relres < 1e-13
    assert np.linalg.norm(backend.to_numpy(x) - x_ref) < 1e-12 * np.linalg.norm(x_ref)


def test_warm_start_from_the_solution_needs_no_iteration(backend):
    op = random_operator(backend, n=1)
    x_true = backend.asarray(np.random.default_rng(5).standard_normal(op.n))
    b = op.matvec(x_true, backend.xp.empty(op.n))
    assert cg_solve(op, b, x_true.copy(), rtol=1e-10).iterations == 0
    assert FGMRES(rtol=1e-10).solve(op, b, x_true.copy()).iterations == 0


class DiagonalPreconditioner:
    def __init__(self, d):
        self.d = d

    def setup(self, op):
        pass

    def apply(self, r, out):
        out[...] = r / self.d
        return out


@pytest.mark.parametrize("restart", [5, 200])
def test_fgmres_solves_like_a_direct_solver(backend, restart):
    """Right-preconditioned restarted FGMRES on a nonsymmetric operator: the true residual
    reaches the tolerance and the solution is scipy's."""
    op = random_operator(backend)
    A = op.to_scipy().tocsc()
    b = np.random.default_rng(3).standard_normal(op.n)
    x_ref = spla.spsolve(A, b)
    x = backend.xp.zeros(op.n)
    diag = backend.asarray(A.diagonal())
    info = FGMRES(rtol=1e-12, restart=restart, max_iterations=2000).solve(
        op, backend.asarray(b), x, DiagonalPreconditioner(diag)
    )
    assert info.converged and info.relres <= 1e-12
    assert np.linalg.norm(A @ backend.to_numpy(x) - b) <= 1e-12 * np.linalg.norm(b)
    assert np.linalg.norm(backend.to_numpy(x) - x_ref) < 1e-9 * np.linalg.norm(x_ref)
    unpreconditioned = FGMRES(rtol=1e-12, restart=restart, max_iterations=2000).solve(
        op, backend.asarray(b), backend.xp.zeros(op.n)
    )
    assert unpreconditioned.converged and unpreconditioned.iterations > info.iterations


def test_fgmres_basis_grows_with_the_iterations(backend):
    """The basis holds the directions a solve used (BASIS_START, doubled as needed), not the
    restart length's, and growing it keeps the iterates: the residual history equals that of
    a solve whose basis was allocated whole at the start."""
    op = random_operator(backend)
    b = backend.asarray(np.random.default_rng(3).standard_normal(op.n))
    diag = backend.asarray(op.to_scipy().diagonal())
    grown = FGMRES(rtol=1e-10, restart=200, max_iterations=2000)
    info = grown.solve(op, b, backend.xp.zeros(op.n), DiagonalPreconditioner(diag))
    assert BASIS_START < info.iterations < 200
    columns = grown._basis[1].shape[0]
    assert info.iterations <= columns < 2 * info.iterations and columns == BASIS_START * 2 ** round(
        math.log2(columns / BASIS_START)
    )
    whole = FGMRES(rtol=1e-10, restart=200, max_iterations=2000)
    whole._buffers(backend.xp, op.n, 200)
    again = whole.solve(op, b, backend.xp.zeros(op.n), DiagonalPreconditioner(diag))
    assert again.iterations == info.iterations
    np.testing.assert_allclose([r for _, r in again.history], [r for _, r in info.history], rtol=1e-12)


class BoundedNumpy:
    """NumPy whose ``empty`` refuses arrays of more than ``rows`` rows (MemoryError, as
    CuPy's OutOfMemoryError is one): a device whose memory ends there."""

    def __init__(self, rows):
        self.rows = rows

    def __getattr__(self, name):
        return getattr(np, name)

    def empty(self, shape, dtype=float):
        if isinstance(shape, tuple) and len(shape) == 2 and shape[0] > self.rows:
            raise MemoryError(f"{shape}")
        return np.empty(shape, dtype)


def test_fgmres_restarts_where_its_basis_cannot_grow():
    """Out of memory for a larger basis, FGMRES keeps the BASIS_START directions it has and
    restarts when they are full: the same first directions, then a restart, and it still
    converges."""
    op = random_operator(get_backend("cpu"))
    b = np.random.default_rng(3).standard_normal(op.n)
    precond = DiagonalPreconditioner(op.to_scipy().diagonal())
    free = FGMRES(rtol=1e-10, restart=200, max_iterations=2000).solve(op, b, np.zeros(op.n), precond)
    op.xp = BoundedNumpy(BASIS_START + 1)
    bounded = FGMRES(rtol=1e-10, restart=200, max_iterations=2000)
    x = np.zeros(op.n)
    info = bounded.solve(op, b, x, precond)
    assert bounded._basis[1].shape[0] == BASIS_START < free.iterations <= info.iterations
    assert info.history[: BASIS_START + 1] == free.history[: BASIS_START + 1]  # the same first cycle,
    assert info.history[BASIS_START + 1][1] != free.history[BASIS_START + 1][1]  # then a restart
    assert info.converged and np.linalg.norm(op.to_scipy() @ x - b) <= 1e-10 * np.linalg.norm(b)


def test_fgmres_exact_preconditioner_needs_one_iteration_and_reports_nan(backend):
    op = random_operator(backend, n=1)
    A = op.to_scipy().toarray()
    inverse = backend.asarray(np.linalg.inv(A))

    class Exact:
        def setup(self, op):
            pass

        def apply(self, r, out):
            out[...] = inverse @ r
            return out

    b = backend.asarray(np.random.default_rng(4).standard_normal(op.n))
    x = backend.xp.zeros(op.n)
    info = FGMRES(rtol=1e-10).solve(op, b, x, Exact())
    assert info.converged and info.iterations == 1
    bad = b.copy()
    bad[3] = np.nan
    assert FGMRES().solve(op, bad, backend.xp.zeros(op.n)).reason == "nan"
    info = FGMRES(rtol=1e-30, restart=4, max_iterations=6).solve(op, b, backend.xp.zeros(op.n))
    assert info.reason == "max_iterations" and info.iterations == 6


@pytest.mark.parametrize("start", ["zero", "guess"])
def test_gmres_steps_minimise_the_residual_over_the_preconditioned_krylov_space(backend, start):
    """k steps from x0 give the x0 + Z y minimising ||b - A (x0 + Z y)|| over Z = span{M r,
    M A M r, ...}: compared with NumPy's least squares on that space built densely."""
    op = random_operator(backend, seed=4)
    A = op.to_scipy().toarray()
    rng = np.random.default_rng(5)
    b, diag = rng.standard_normal(op.n), 0.5 + rng.random(op.n)
    x0 = None if start == "zero" else rng.standard_normal(op.n)
    r = b - (0 if x0 is None else A @ x0)
    basis = [r / diag]
    for _ in range(3):
        basis.append((A @ basis[-1]) / diag)
    Z = np.array(basis).T
    y = np.linalg.lstsq(A @ Z, r, rcond=None)[0]
    expected = (0 if x0 is None else x0) + Z @ y
    guess = None if x0 is None else backend.asarray(x0)
    x = gmres_steps(op, backend.asarray(b), guess, DiagonalPreconditioner(backend.asarray(diag)), 4)
    assert np.linalg.norm(backend.to_numpy(x) - expected) < 1e-9 * np.linalg.norm(expected)
    assert np.linalg.norm(b - A @ backend.to_numpy(x)) < 0.5 * np.linalg.norm(r)


def test_gmres_steps_exact_in_one_step_zero_and_nan(backend):
    """An exact preconditioner ends the Arnoldi process after one step (the later steps are
    dropped, not divided by zero); a zero residual returns x; NaN comes back as NaN."""
    xp = backend.xp
    op = random_operator(backend, seed=6)
    A = op.to_scipy().tocsc()
    b = np.random.default_rng(7).standard_normal(op.n)

    class Exact:
        def apply(self, r, out):
            out[...] = backend.asarray(spla.spsolve(A, backend.to_numpy(r)))
            return out

    x = gmres_steps(op, backend.asarray(b), None, Exact(), 3)
    assert np.linalg.norm(backend.to_numpy(x) - spla.spsolve(A, b)) < 1e-10 * np.linalg.norm(b)
    assert float(abs(gmres_steps(op, xp.zeros(op.n), None, Exact(), 3)).max()) == 0.0
    bad = backend.asarray(b)
    bad[3] = np.nan
    assert bool(xp.isnan(gmres_steps(op, bad, None, Exact(), 3)).all())


def hessenberg_cases():
    """(H, beta) with H (m + 1, m + 1) as gmres_steps builds it: a full-rank Hessenberg matrix
    (positive subdiagonal), one whose Krylov space ends after 3 columns, a NaN, beta 0."""
    rng = np.random.default_rng(8)
    cases = []
    for m, end in ((8, None), (8, 3), (5, None)):
        H = np.zeros((m + 1, m + 1))
        H[:, :m] = np.triu(rng.standard_normal((m + 1, m)), -1)
        H[np.arange(1, m + 1), np.arange(m)] = 0.1 + rng.random(m)
        if end is not None:
            H[end, end - 1] = 1e-17
            H[end + 1 :, end:m] = np.nan  # what follows the end is never read
        H[0, m] = 2.5
        cases.append(H)
    nan = cases[-1].copy()
    nan[2, 3] = np.nan
    zero = cases[0].copy()
    zero[0, -1] = 0.0
    return cases, nan, zero


def test_hessenberg_least_squares_match_numpy_lstsq():
    """fem3d.kernels.hessenberg (Givens rotations) gives numpy.linalg.lstsq's minimiser of
    ||beta e1 - H y||, over the columns up to the end of the Krylov space (zeros after it);
    NaN for a non-finite entry, zeros for beta 0."""
    cases, nan, zero = hessenberg_cases()
    for H, k in zip(cases, (8, 3, 5)):
        m = H.shape[0] - 1
        e1 = np.zeros(k + 1)
        e1[0] = H[0, m]
        ref = np.zeros(m)
        ref[:k] = np.linalg.lstsq(H[: k + 1, :k], e1, rcond=None)[0]
        assert np.abs(hessenberg.lstsq_numpy(H) - ref).max() < 1e-13 * np.abs(ref).max()
    assert np.isnan(hessenberg.lstsq_numpy(nan)).all() and not hessenberg.lstsq_numpy(zero).any()


@pytest.mark.gpu
def test_hessenberg_kernel_matches_the_numpy_reference():
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    cases, nan, zero = hessenberg_cases()
    for H in cases:
        ref = hessenberg.lstsq_numpy(H)
        assert np.abs(hessenberg.lstsq_cuda(cp.asarray(H)).get() - ref).max() < 1e-14 * np.abs(ref).max()
    assert cp.isnan(hessenberg.lstsq_cuda(cp.asarray(nan))).all() and not hessenberg.lstsq_cuda(cp.asarray(zero)).any()
    with pytest.raises(ValueError, match="at most 32 GMRES steps"):
        hessenberg.lstsq_cuda(cp.zeros((34, 34)))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [7, 300_001])
def test_dense_product_kernels_match_the_numpy_references(n):
    """fem3d.kernels.vectors: the CUDA products equal the NumPy references to round-off (a
    ragged tail, 1 to 51 vectors: more than one group of 8; a view of a longer basis), and
    the multiple dot product gives the same bits on every run."""
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    cu, ref = vectors.CudaVectors, vectors.NumpyVectors
    rng = np.random.default_rng(10)
    basis = rng.standard_normal((52, n))
    w = rng.standard_normal(n)
    for m in (1, 8, 9, 51):
        V = basis[:m]
        got = cu.multi_dot(cp.asarray(basis)[:m], cp.asarray(w))
        assert np.abs(got.get() - ref.multi_dot(V, w)).max() < 1e-12 * np.sqrt(n) * (
            1 + np.abs(ref.multi_dot(V, w)).max()
        )
        assert cp.array_equal(got, cu.multi_dot(cp.asarray(basis)[:m], cp.asarray(w)))
        h = rng.standard_normal(m)
        x = cp.asarray(w)
        cu.combine(cp.asarray(basis)[:m], cp.asarray(h), x, -0.5)
        assert np.abs(x.get() - ref.combine(V, h, w.copy(), -0.5)).max() < 1e-12 * (1 + np.abs(w).max()) * m
    a, P = rng.standard_normal((min(n, 1000), 89)), rng.standard_normal((89, 89))
    for transpose in (False, True):
        out = cu.rows_times(cp.asarray(a), cp.asarray(P), cp.empty(a.shape), transpose)
        assert (
            np.abs(out.get() - ref.rows_times(a, P, np.empty(a.shape), transpose)).max() < 1e-12 * np.abs(a @ P).max()
        )
    A = rng.standard_normal((min(n, 2000),) * 2)
    x = rng.standard_normal(A.shape[0])
    assert np.abs(cu.gemv(cp.asarray(A), cp.asarray(x)).get() - A @ x).max() < 1e-12 * np.abs(A @ x).max()
    for m, scale in ((0, 1.0), (5, 1.0), (5, 0.0)):  # beta alone, an Arnoldi column, a zero vector left as it is
        h, h2, src = (rng.standard_normal(m) if m else None), (rng.standard_normal(m) if m else None), scale * w
        sq = np.array([src @ src])
        H, Hd = np.zeros((7, 7)), cp.zeros((7, 7))  # the column written into a view of H (a stride of 7)
        dst, got = np.empty(n), cp.empty(n)
        column = ref.normalise(src, dst, sq, h, h2, H[: m + 1, 3])
        device = (None, None) if h is None else (cp.asarray(h), cp.asarray(h2))
        cu.normalise(cp.asarray(src), got, cp.asarray(sq), *device, Hd[: m + 1, 3])
        assert np.shares_memory(column, H) and np.array_equal(Hd.get(), H) and H[m, 3] == np.sqrt(sq[0])
        assert np.array_equal(got.get(), dst) and np.array_equal(dst, src / (np.sqrt(sq[0]) if scale else 1.0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_gemv_kernel_matches_the_numpy_reference(dtype):
    """fem3d.kernels.vectors.batched_gemv on views as line Vanka takes them (a block of the
    first columns of each matrix, vectors at a stride between items, added into or written):
    the CUDA kernel equals the NumPy reference to the type's round-off; other types refused."""
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    cu, ref = vectors.CudaVectors, vectors.NumpyVectors
    rng = np.random.default_rng(11)
    M = rng.standard_normal((1001, 58, 58)).astype(dtype)
    x = rng.standard_normal((1001, 89)).astype(dtype)
    y = rng.standard_normal((1001, 89)).astype(dtype)
    eps = np.finfo(dtype).eps
    for rows, cols, sign, accumulate in ((58, 58, 1.0, False), (58, 31, -1.0, True), (31, 58, 1.0, False)):
        want = ref.batched_gemv(M[:, :rows, :cols], x[:, 3 : 3 + cols], y.copy()[:, 1 : 1 + rows], sign, accumulate)
        out = cp.asarray(y)
        cu.batched_gemv(
            cp.asarray(M)[:, :rows, :cols], cp.asarray(x)[:, 3 : 3 + cols], out[:, 1 : 1 + rows], sign, accumulate
        )
        got = out.get()
        assert np.abs(got[:, 1 : 1 + rows] - want).max() <= 50 * eps * np.abs(want).max()
        assert np.array_equal(np.delete(got, np.s_[1 : 1 + rows], axis=1), np.delete(y, np.s_[1 : 1 + rows], axis=1))
    with pytest.raises(ValueError, match="float32 or float64"):
        cu.batched_gemv(cp.asarray(M).astype(np.float16), cp.asarray(x)[:, :58], cp.asarray(y)[:, :58])


@pytest.mark.gpu
def test_all_finite_kernel_matches_the_numpy_reference():
    """fem3d.kernels.vectors.all_finite: the CUDA kernel and NumPy agree on float16, float32 and
    float64 arrays (and a strided view) with a NaN, an infinity or nothing bad at the first, a middle
    or the last entry, in arrays of 1 to 3 * 10^5 entries."""
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    cu, ref = vectors.CudaVectors, vectors.NumpyVectors
    for dtype in (np.float16, np.float32, np.float64):
        for n in (1, 300_001):
            for at in sorted({0, n // 2, n - 1}):
                for bad in (None, np.nan, np.inf, -np.inf):
                    a = np.ones(n, dtype=dtype)
                    if bad is not None:
                        a[at] = bad
                    assert cu.all_finite(cp.asarray(a)) == ref.all_finite(a) == (bad is None)
        view = np.ones((4, 6), dtype=dtype)
        view[1, 1] = np.nan
        assert cu.all_finite(cp.asarray(view)[:, ::2]) == ref.all_finite(view[:, ::2]) is True
        assert cu.all_finite(cp.asarray(view)[:, 1::2]) == ref.all_finite(view[:, 1::2]) is False


@pytest.mark.gpu
def test_cuda_vector_kernels_match_numpy_reference():
    from gpucfd.backend import cupy_module, get_backend

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
    frozen = [cp.asarray(v) for v in (x, r, z, p, q, s)]
    sc_d[8] = 1.0  # a breakdown: the update leaves every vector as it is
    update_gpu(*frozen, cp.asarray(minv), sc_d)
    for h, d in zip((x, r, z, p, q, s), frozen):
        assert np.array_equal(d.get(), h)
