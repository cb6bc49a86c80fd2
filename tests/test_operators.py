import numpy as np
import pytest

from fem3d.discretisation.mesh import box_mesh
from fem3d.kernels import ebe
from fem3d.solvers.linear import LeftNull
from fem3d.solvers.operators import ElementOperator
from support import assembled, sample_mesh

MESHES = ["box", "distorted", "annulus"]


def gpu_backend():
    """The CuPy backend, or the test skipped without a GPU."""
    from gpucfd.backend import cupy_module, get_backend

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    return get_backend("gpu")


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
    approx = np.bincount(
        backend.to_numpy(solver.op.dofs).ravel(),
        (backend.to_numpy(solver.op.mats)[:, :, : ebe.NL] ** 2).sum(axis=1).ravel(),
    )
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
    at = backend.to_numpy(system.bc_unknowns)
    assert np.array_equal(np.sort(at), fixed)
    residual, values = backend.to_numpy(state.residual), backend.to_numpy(system.bc_values)
    assert np.allclose(residual[at], backend.to_numpy(x)[at] - values, rtol=1e-14, atol=1e-15)
    assert len(fixed) == 3 * len(mesh.boundary_nodes())


def test_left_null_vector_of_an_enclosed_flow_from_its_nonzero_entries(backend):
    """LeftNull keeps only the nonzero entries of the unit left null vector y of D A (D the
    residual's row weights) of an enclosed flow: y is the left singular vector of D A's
    smallest singular value (NumPy's SVD of the assembled matrix), and remove_from leaves a
    right-hand side orthogonal to it."""
    mesh = box_mesh(2)
    system, _, state = assembled(mesh, backend)
    assert system.problem.enclosed
    DA = backend.to_numpy(state.scale)[:, None] * system.op.to_scipy().toarray()
    u, s, _ = np.linalg.svd(DA)
    assert s[-1] < 1e-13 * s[0] < s[-2]  # one null vector
    null = LeftNull(system, state.scale)
    y = np.zeros(system.n)
    y[backend.to_numpy(null.at)] = backend.to_numpy(null.values)
    assert len(null.at) == mesh.n_pressure + len(system.bc_unknowns)  # the free velocity rows' zeros not kept
    assert abs(abs(y @ u[:, -1]) - 1.0) < 1e-12 and np.linalg.norm(y @ DA) < 1e-13 * s[0]
    b = backend.asarray(np.random.default_rng(3).standard_normal(system.n))
    before = backend.to_numpy(b)
    null.remove_from(b)
    assert abs(y @ backend.to_numpy(b)) < 1e-14 * np.linalg.norm(before)
    assert np.allclose(backend.to_numpy(b), before - (y @ before) * y, rtol=0, atol=1e-15)


def split_colours(mesh):
    """Two passes over the mesh's colours: the first third of each colour, then the rest."""
    ranges = ebe.colour_ranges(mesh.colour_offsets)
    cut = [a + (b - a) // 3 for a, b in ranges]
    return [(a, k) for (a, _), k in zip(ranges, cut)], [(k, b) for (_, b), k in zip(ranges, cut)]


def test_products_over_element_ranges_add_up(backend):
    """Two passes over parts of the colours, the second added (accumulate), give the product
    over every element; a pass over no element gives zero."""
    mesh = sample_mesh("annulus")
    rng = np.random.default_rng(8)
    op = ElementOperator(backend, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs)
    op.mats[...] = backend.asarray(rng.standard_normal(op.mats.shape))
    x = backend.asarray(rng.standard_normal(mesh.n_dofs))
    apply, xp = ebe.for_backend(backend), backend.xp
    first, rest = split_colours(mesh)
    for transpose in (False, True):
        whole, parts = xp.empty(op.n), xp.full(op.n, xp.nan)
        apply(op.mats, op.dofs, x, whole, op.colours, transpose)
        apply(op.mats, op.dofs, x, parts, first, transpose)
        apply(op.mats, op.dofs, x, parts, rest, transpose, accumulate=True)
        assert float(xp.abs(parts - whole).max()) <= 1e-13 * float(xp.abs(whole).max())
        apply(op.mats, op.dofs, x, parts, [(0, 0)], transpose)
        assert not parts.any()


@pytest.mark.gpu
@pytest.mark.parametrize("ld", [ebe.LD, 96])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cuda_kernels_match_numpy_reference(ld, dtype):
    """Both products, stored unpadded or padded to 96 columns (padding never read), in
    float64 and float32 storage (the kernel sums in float64, the NumPy reference each
    element's products in the storage precision: 1e-6 apart in float32)."""
    gpu = gpu_backend()
    cp = gpu.xp
    mesh = sample_mesh("annulus")
    rng = np.random.default_rng(2)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, ld)).astype(dtype)
    mats[:, :, ebe.NL :] = np.nan
    dofs = mesh.dofs().astype(np.int32)
    x = rng.standard_normal(mesh.n_dofs)
    first, rest = split_colours(mesh)
    for transpose in (False, True):
        ref = np.full(mesh.n_dofs, np.nan)
        ebe.apply_numpy(mats, dofs, x, ref, ebe.colour_ranges(mesh.colour_offsets), transpose)
        got = cp.full(mesh.n_dofs, cp.nan)
        ebe.apply_cuda(
            cp.asarray(mats), cp.asarray(dofs), cp.asarray(x), got, ebe.colour_ranges(mesh.colour_offsets), transpose
        )
        assert np.linalg.norm(got.get() - ref) <= (1e-13 if dtype == np.float64 else 1e-6) * np.linalg.norm(ref)
        ebe.apply_cuda(
            cp.asarray(mats), cp.asarray(dofs), cp.asarray(x), got, first, transpose
        )  # two passes, the second added
        ebe.apply_cuda(cp.asarray(mats), cp.asarray(dofs), cp.asarray(x), got, rest, transpose, accumulate=True)
        assert np.linalg.norm(got.get() - ref) <= (1e-13 if dtype == np.float64 else 1e-6) * np.linalg.norm(ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_row_sums_give_the_bits_of_the_colours(dtype):
    """ebe.RowSums (one launch for every element, the sums by ScatterPlan.fold) gives the
    bits of the products added colour by colour, overwriting y and added to it, in every
    storage; and a GPU ElementOperator takes that way."""
    gpu = gpu_backend()
    cp = gpu.xp
    mesh = sample_mesh("annulus")
    rng = np.random.default_rng(5)
    mats = cp.asarray(rng.standard_normal((mesh.n_elements, ebe.NL, ebe.LD)))
    scale = None
    if dtype == np.float16:
        half, scale = cp.empty(mats.shape, dtype=cp.float16), cp.empty(mats.shape[:2], dtype=cp.float32)
        ebe.quantise(mats, half, scale)
        mats = half
    else:
        mats = mats.astype(dtype)
    dofs = cp.asarray(mesh.dofs().astype(np.int32))
    x = cp.asarray(rng.standard_normal(mesh.n_dofs))
    colours = ebe.colour_ranges(mesh.colour_offsets)
    row_sums = ebe.RowSums(gpu, dofs, mesh.n_dofs)
    start = cp.asarray(rng.standard_normal(mesh.n_dofs))
    for accumulate in (False, True):
        ref, got = start.copy(), cp.full(mesh.n_dofs, cp.nan) if not accumulate else start.copy()
        ebe.apply_cuda(mats, dofs, x, ref, colours, False, scale, accumulate)
        row_sums.apply(mats, dofs, x, got, scale, accumulate)
        assert cp.array_equal(got, ref)
    op = ElementOperator(gpu, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs, matrix_dtype=np.float64)
    assert op.row_sums is not None
    op.mats[...] = mats.astype(np.float64) if dtype != np.float16 else mats.astype(np.float64) * scale[:, :, None]
    ebe.apply_cuda(op.mats, op.dofs, x, ref, colours)
    assert cp.array_equal(op.matvec(x, cp.empty_like(x)), ref)


def test_quantise_scales_each_row_into_unit_range():
    """Rows over 40 decades, a row of zeros, a NaN row and an inf row, written at elements
    first:first + m of storage for more elements (the rest and the padding columns
    untouched), and at scattered elements."""
    rng = np.random.default_rng(3)
    m, first = 5, 2
    mats = rng.standard_normal((m, ebe.NL, 96)) * 10.0 ** rng.uniform(-20, 20, (m, ebe.NL, 1))
    mats[:, :, ebe.NL :] = np.nan  # padding, never read
    mats[1, 7] = 0.0
    half = np.full((m + 3, ebe.NL, 96), 0.5, dtype=np.float16)
    scale = np.full((m + 3, ebe.NL), -1.0, dtype=np.float32)
    for source in (mats, mats.astype(np.float32)):
        ebe.quantise(source, half, scale, slice(first, first + m))
        rows, part = source[:, :, : ebe.NL], half[first : first + m, :, : ebe.NL]
        assert np.all(half[:first] == 0.5) and np.all(half[first + m :] == 0.5) and np.all(half[:, :, ebe.NL :] == 0.5)
        assert np.all(scale[:first] == -1) and np.all(scale[first + m :] == -1)
        top = np.abs(rows).max(axis=2).astype(np.float32)
        top[1, 7] = 1.0
        assert np.array_equal(scale[first : first + m], top)
        assert np.all(np.abs(part) <= 1) and np.all(part[1, 7] == 0)
        error = np.abs(part.astype(np.float64) * scale[first : first + m, :, None] - rows).max(axis=2)
        assert np.all(error <= 2.0**-11 * top)
    bad = mats[:2].copy()
    bad[0, 3, 10], bad[1, 4, 20] = np.nan, -np.inf
    with np.errstate(invalid="ignore"):  # inf / inf
        ebe.quantise(bad, half, scale, slice(0, 2))
    assert np.isnan(scale[0, 3]) and np.isinf(scale[1, 4])
    assert np.isfinite(np.delete(scale[:2].reshape(-1), [3, ebe.NL + 4])).all()
    at = np.array([6, 0, 3, 1, 7])
    scattered, scattered_scale = np.zeros_like(half), np.zeros_like(scale)
    ebe.quantise(mats, scattered, scattered_scale, at)
    ebe.quantise(mats, half, scale, slice(first, first + m))
    assert np.array_equal(scattered[at, :, : ebe.NL], half[first : first + m, :, : ebe.NL]) and np.array_equal(
        scattered_scale[at], scale[first : first + m]
    )


def random_half(mesh, ld=ebe.LD, seed=4):
    """Float64 element matrices (E, NL, ld) (padding NaN) and their float16 storage."""
    rng = np.random.default_rng(seed)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, ld)) * 10.0 ** rng.uniform(-3, 3, (mesh.n_elements, ebe.NL, 1))
    mats[:, :, ebe.NL :] = np.nan
    half = np.full(mats.shape, np.nan, dtype=np.float16)
    scale = np.empty(mats.shape[:2], dtype=np.float32)
    ebe.quantise(mats, half, scale)
    return mats, half, scale


def test_half_products_are_those_of_the_scaled_rows():
    """The float16 NumPy products (in float32) equal the float64 products of the matrices
    diag(scale) H, for A and A^T; row_scale comes with float16 matrices and only with them."""
    mesh = sample_mesh("box")
    _, half, scale = random_half(mesh)
    exact = half.astype(np.float64) * scale[:, :, None]
    dofs = mesh.dofs().astype(np.int32)
    x = np.random.default_rng(5).standard_normal(mesh.n_dofs)
    for transpose in (False, True):
        ref, got = np.empty(mesh.n_dofs), np.full(mesh.n_dofs, np.nan)
        ebe.apply_numpy(exact, dofs, x, ref, ebe.colour_ranges(mesh.colour_offsets), transpose)
        ebe.apply_numpy(half, dofs, x, got, ebe.colour_ranges(mesh.colour_offsets), transpose, row_scale=scale)
        assert np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(ref)
    y = np.empty(mesh.n_dofs)
    for mats, row_scale in ((half, None), (exact, scale), (half, scale.astype(np.float64)), (half, scale[:, :8])):
        with pytest.raises(ValueError, match="row_scale"):
            ebe.apply_numpy(mats, dofs, x, y, ebe.colour_ranges(mesh.colour_offsets), row_scale=row_scale)
    assert "-DROW_SCALE" in ebe.matrix_options(half) and "-DMAT_T=__half" in ebe.matrix_options(half)
    assert not any("ROW_SCALE" in o for o in ebe.matrix_options(exact))


def test_element_operator_with_half_storage(backend):
    """matvec and rmatvec with float16 storage are those of the assembled diag(scale) H
    (to_scipy), within float16's rounding of the original matrices; the exact diagonal of
    A^T A and the peers' entries are not offered."""
    mesh = sample_mesh("annulus")
    op = ElementOperator(backend, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs, matrix_dtype=np.float16)
    assert (
        op.mats.dtype == np.float16
        and op.row_scale.dtype == np.float32
        and op.row_scale.shape == (mesh.n_elements, ebe.NL)
    )
    assert np.all(backend.to_numpy(op.row_scale) == 1)
    mats, _, _ = random_half(mesh)
    ebe.quantise(backend.asarray(mats), op.mats, op.row_scale)
    A = op.to_scipy()
    A0 = ElementOperator(backend, mesh.dofs(), mesh.colour_offsets, mesh.n_dofs)
    A0.mats[...] = backend.asarray(mats)
    A0 = A0.to_scipy()
    v = np.random.default_rng(6).standard_normal(mesh.n_dofs)
    out = backend.xp.empty(mesh.n_dofs)
    for product, ref, ref0 in ((op.matvec, A @ v, A0 @ v), (op.rmatvec, A.T @ v, A0.T @ v)):
        got = backend.to_numpy(product(backend.asarray(v), out))
        assert np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(ref)
        assert 1e-5 * np.linalg.norm(ref0) <= np.linalg.norm(got - ref0) <= 2e-3 * np.linalg.norm(ref0)
    with pytest.raises(ValueError, match="float16"):
        op.normal_diagonal()


@pytest.mark.gpu
@pytest.mark.parametrize("ld", [ebe.LD, 96])
def test_cuda_half_rows_match_numpy_reference(ld):
    """Both products from float16 storage quantised on the device (the scales those of
    NumPy's quantise), against the NumPy reference's float32 products: 1e-6 apart."""
    from gpucfd.backend import cupy_module

    cp = cupy_module()
    if cp is None:
        pytest.skip("no CUDA GPU")
    mesh = sample_mesh("annulus")
    mats, _, scale_ref = random_half(mesh, ld)
    half = cp.full(mats.shape, cp.nan, dtype=cp.float16)
    scale = cp.empty(mats.shape[:2], dtype=cp.float32)
    ebe.quantise(cp.asarray(mats), half, scale)
    assert np.array_equal(scale.get(), scale_ref)
    dofs = mesh.dofs().astype(np.int32)
    x = np.random.default_rng(7).standard_normal(mesh.n_dofs)
    for transpose in (False, True):
        ref = np.full(mesh.n_dofs, np.nan)
        ebe.apply_numpy(
            half.get(), dofs, x, ref, ebe.colour_ranges(mesh.colour_offsets), transpose, row_scale=scale.get()
        )
        got = cp.full(mesh.n_dofs, cp.nan)
        ebe.apply_cuda(
            half,
            cp.asarray(dofs),
            cp.asarray(x),
            got,
            ebe.colour_ranges(mesh.colour_offsets),
            transpose,
            row_scale=scale,
        )
        assert np.linalg.norm(got.get() - ref) <= 1e-6 * np.linalg.norm(ref)
