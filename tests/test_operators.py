import numpy as np
import pytest

from fem3d.kernels import ebe
from support import assembled, sample_mesh

MESHES = ["box", "distorted", "annulus"]


@pytest.mark.parametrize("name", MESHES)
def test_ebe_products_equal_assembled_csr(backend, name):
    mesh = sample_mesh(name)
    solver, _, state = assembled(mesh, backend)
    A = solver.op.to_scipy()
    rng = np.random.default_rng(1)
    v = rng.standard_normal(mesh.n_dofs)
    out = backend.xp.empty(mesh.n_dofs)
    for product, ref in ((solver.op.matvec, A @ v), (solver.op.rmatvec, A.T @ v)):
        got = backend.to_numpy(product(backend.asarray(v), out))
        assert np.linalg.norm(got - ref) <= 1e-12 * np.linalg.norm(ref)


@pytest.mark.parametrize("name", MESHES)
def test_normal_diagonal_is_exact(backend, name):
    mesh = sample_mesh(name)
    solver, _, state = assembled(mesh, backend)
    A = solver.op.to_scipy()
    ref = np.asarray(A.multiply(A).sum(axis=0)).ravel()
    got = backend.to_numpy(solver.op.normal_diagonal())
    assert np.allclose(got, ref, rtol=1e-13, atol=0)
    small = backend.to_numpy(solver.op.normal_diagonal(max_entries=5000))  # many row blocks
    assert np.allclose(small, ref, rtol=1e-13, atol=0)
    # the per-element sum of squares differs where elements share (row, column) pairs
    approx = np.bincount(backend.to_numpy(solver.op.dofs).ravel(), (backend.to_numpy(solver.op.mats)[:, :, :ebe.NL] ** 2).sum(axis=1).ravel())
    assert not np.allclose(approx, ref, rtol=1e-3)


def test_prescribed_rows_fix_the_boundary_value(backend):
    """After summing over elements each prescribed row has one entry, 1 on the diagonal
    (Algorithm 1: 1/S_k in each of the S_k elements), and its residual is x_i - value."""
    mesh = sample_mesh("distorted")
    system, x, state = assembled(mesh, backend)
    A = system.op.to_scipy().tocsr()
    A.eliminate_zeros()
    fixed = np.flatnonzero(backend.to_numpy(system.fixed))
    rows = A[fixed]
    assert np.all(np.diff(rows.indptr) == 1) and np.all(rows.indices == fixed)
    assert np.allclose(rows.data, 1.0, rtol=1e-14)
    residual, values = backend.to_numpy(state.residual), backend.to_numpy(system.bc_values)
    assert np.allclose(residual[fixed], backend.to_numpy(x)[fixed] - values[fixed], rtol=1e-14, atol=1e-15)
    assert len(fixed) == 3 * len(mesh.boundary_nodes())


@pytest.mark.gpu
@pytest.mark.parametrize("ld", [ebe.LD, 96])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cuda_kernels_match_numpy_reference(ld, dtype):
    """Both products, stored unpadded or padded to 96 columns (padding never read), in
    float64 and float32 storage (the kernel sums in float64, the NumPy reference each
    element's products in the storage precision: 1e-6 apart in float32)."""
    from gpucfd.backend import cupy_module, get_backend

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    gpu = get_backend("gpu")
    cp = gpu.xp
    mesh = sample_mesh("annulus")
    rng = np.random.default_rng(2)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, ld)).astype(dtype)
    mats[:, :, ebe.NL:] = np.nan
    dofs = mesh.dofs().astype(np.int32)
    x = rng.standard_normal(mesh.n_dofs)
    for transpose in (False, True):
        ref = np.full(mesh.n_dofs, np.nan)
        ebe.apply_numpy(mats, dofs, x, ref, mesh.colour_offsets, transpose)
        got = cp.full(mesh.n_dofs, cp.nan)
        ebe.apply_cuda(cp.asarray(mats), cp.asarray(dofs), cp.asarray(x), got, mesh.colour_offsets, transpose)
        assert np.linalg.norm(got.get() - ref) <= (1e-13 if dtype == np.float64 else 1e-6) * np.linalg.norm(ref)
