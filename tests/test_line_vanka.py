import numpy as np
import pytest

from fem3d.kernels import ebe
from fem3d.solvers import line_vanka
from fem3d.solvers.line_vanka import LineVanka, element_lines, line_levels, smoother_for
from fem3d.solvers.linear import LinearOptions
from gpucfd.errors import InputError
from fem3d.solvers.operators import ElementOperator
from fem3d.solvers.vanka import Vanka
from support import assembled, sample_mesh, twisted_mesh
from gpucfd.backend import get_backend
from test_multigrid import hierarchy
from test_operators import gpu_backend


def layered(grading: float, n: int = 8):
    """An n^3 file mesh of turned elements whose layers are graded toward z = 0 and 1 (3.25:
    the two layers at each wall 20.5 and 4.2 times wider than thick at n = 8)."""
    return twisted_mesh(grid=(n, n, n), jitter=0.0, grading=(0.0, 0.0, grading), seed=2)


@pytest.fixture
def two_layers(monkeypatch):
    """Lines through both stretched layers at each wall: LINE_STRETCH 3 (patches of 3)."""
    monkeypatch.setattr(line_vanka, "LINE_STRETCH", 3.0)


def test_lines_run_across_the_thin_layers(two_layers):
    """Each element more than LINE_STRETCH times longer than thick (the two layers at each
    wall) lists itself and the elements across its two large faces (the layers below and
    above it, -1 at a wall); every other element itself alone."""
    mesh = layered(3.25)
    lines = element_lines(mesh)
    centres = mesh.points[mesh.cells[:, 13]]
    stretched = mesh.stretches > line_vanka.LINE_STRETCH
    assert stretched.any() and not stretched.all()
    assert (lines[:, 0] == np.arange(mesh.n_elements)).all()
    assert (lines[~stretched, 1:] == -1).all()
    for e in np.flatnonzero(stretched):
        for f in lines[e, 1:][lines[e, 1:] >= 0]:
            step = centres[f] - centres[e]
            assert abs(step[2]) > 0 and np.allclose(step[:2], 0.0, atol=1e-12)  # straight across z
        at_wall = centres[e, 2] < 0.01 or centres[e, 2] > 0.99
        assert (lines[e, 1:] >= 0).sum() == (1 if at_wall else 2)
    assert element_lines(sample_mesh("box")) is None


def test_line_columns_are_the_element_then_each_neighbour_off_its_face(backend, two_layers):
    """The stored rows' columns: the element's 89 unknowns, then for each line neighbour (the
    present first) its 58 unknowns off the face it shares with the element; the columns of
    an absent neighbour repeat the element's first unknown."""
    mesh = layered(3.25)
    system, _, _ = assembled(mesh, backend)
    lines = element_lines(mesh)
    smoother = LineVanka(system.op, mesh, system.valence, np.float64, lines)
    cols = backend.to_numpy(smoother.inverses.cols)
    dofs = mesh.dofs()
    assert cols.shape == (mesh.n_elements, 89 + 2 * 58)
    for e in range(mesh.n_elements):
        assert (cols[e, :89] == dofs[e]).all()
        present = lines[e, 1:][lines[e, 1:] >= 0]
        for j in range(2):
            block = cols[e, 89 + 58 * j : 89 + 58 * (j + 1)]
            if j < len(present):
                assert len(set(block)) == 58 and set(block) == set(dofs[present[j]]) - set(dofs[e])
            else:
                assert (block == dofs[e, 0]).all()


def test_line_vanka_is_restricted_additive_schwarz_on_the_assembled_matrix(backend, two_layers):
    """z = sum_e W_e [B_patch^-1]_(rows of e) r_patch with each patch's block cut from the
    assembled level matrix (SciPy): the smoother's patch blocks read off its members' element
    blocks are the assembled ones."""
    mesh = layered(3.25)
    system, _, _ = assembled(mesh, backend, kind="newton")
    smoother = LineVanka(system.op, mesh, system.valence, np.float64, element_lines(mesh))
    assert smoother.setup()
    A = system.op.to_scipy().tocsr()
    dofs = mesh.dofs()
    weights = 1.0 / backend.to_numpy(system.valence)
    r = np.random.default_rng(2).standard_normal(system.n)
    ref = np.zeros(system.n)
    for e, members in enumerate(element_lines(mesh)):
        patch = np.unique(dofs[members[members >= 0]])
        rows = np.linalg.inv(A[patch][:, patch].toarray())[np.searchsorted(patch, dofs[e])]
        ref[dofs[e]] += weights[dofs[e]] * (rows @ r[patch])
    got = backend.to_numpy(smoother.apply(backend.asarray(r), backend.xp.empty(system.n)))
    assert np.linalg.norm(got - ref) <= 1e-9 * np.linalg.norm(ref)


def test_line_vanka_on_isotropic_cells_is_element_vanka(backend):
    """Where no element is stretched every patch is its element: the same smoothing as
    element Vanka, to round-off."""
    mesh = layered(0.0, 4)
    system, _, _ = assembled(mesh, backend)
    alone = np.full((mesh.n_elements, 3), -1)
    alone[:, 0] = np.arange(mesh.n_elements)
    line = LineVanka(system.op, mesh, system.valence, np.float64, alone)
    element = Vanka(system.op, mesh, system.valence, np.float64)
    assert line.setup() and element.setup()
    r = backend.asarray(np.random.default_rng(3).standard_normal(system.n))
    a, b = (backend.to_numpy(s.apply(r, backend.xp.empty(system.n))) for s in (line, element))
    assert np.linalg.norm(a - b) <= 1e-12 * np.linalg.norm(b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_products_with_their_own_columns_match_the_reference(dtype):
    """ebe products of NL x K matrices with their own columns (cols), by colours and by
    RowSums on a GPU, against the NumPy reference: to round-off in float64, to float32's
    and float16's storage rounding otherwise."""
    gpu = gpu_backend()
    cp = gpu.xp
    mesh = layered(3.25)
    rng = np.random.default_rng(7)
    cols = rng.integers(0, mesh.n_dofs, (mesh.n_elements, 89 + 2 * 58)).astype(np.int32)
    mats = rng.standard_normal((mesh.n_elements, ebe.NL, cols.shape[1]))
    scale = None
    if dtype == np.float16:
        half, scale = np.empty(mats.shape, dtype=np.float16), np.empty(mats.shape[:2], dtype=np.float32)
        ebe.quantise(mats, half, scale, columns=cols.shape[1])
        mats = half
    else:
        mats = mats.astype(dtype)
    dofs = mesh.dofs().astype(np.int32)
    x = rng.standard_normal(mesh.n_dofs)
    colours = ebe.colour_ranges(mesh.colour_offsets)
    ref = np.zeros(mesh.n_dofs)
    ebe.apply_numpy(mats, dofs, x, ref, colours, row_scale=scale, cols=cols)
    on = [cp.asarray(a) if a is not None else None for a in (mats, dofs, x, scale, cols)]
    got = cp.zeros(mesh.n_dofs)
    ebe.apply_cuda(on[0], on[1], on[2], got, colours, row_scale=on[3], cols=on[4])
    summed = cp.full(mesh.n_dofs, cp.nan)
    ebe.RowSums(gpu, on[1], mesh.n_dofs).apply(on[0], on[1], on[2], summed, on[3], cols=on[4])
    assert cp.array_equal(got, summed)
    tol = 1e-13 if dtype == np.float64 else 1e-6
    assert np.linalg.norm(cp.asnumpy(got) - ref) <= tol * np.linalg.norm(ref)
    op = ElementOperator(gpu, dofs, mesh.colour_offsets, mesh.n_dofs, matrix_dtype=np.float64, cols=cols)
    with pytest.raises(ValueError, match="not transposed"):
        op.rmatvec(on[2], cp.empty_like(on[2]))


@pytest.mark.parametrize("groups", [1, 5])
def test_line_vanka_summed_in_slabs_and_streamed_matches_the_stored_one(backend, monkeypatch, groups):
    """The finest level's line Vanka with its blocks summed in one target group or in five
    slabs (each widened by its patches' members outside it, with their halo), from stored
    matrices and from matrices computed chunk by chunk (partial assembly): the same inverses
    (to float32 sums in another order) and cycle."""
    from fem3d.solvers import vanka as vanka_module

    mesh = layered(3.25, 6)
    monkeypatch.setattr(vanka_module, "GROUP", -(-mesh.n_elements // groups))
    _, mg, _ = hierarchy(backend, mesh=mesh, re=50.0, levels=1, smoother="line")
    _, mgs, _ = hierarchy(backend, mesh=mesh, re=50.0, levels=1, assembly="partial", smoother="line")
    smoother, ref_smoother = mgs.levels[0].smoother, mg.levels[0].smoother
    assert isinstance(smoother, LineVanka) and len(smoother.groups) == groups
    if groups > 1:
        assert any(len(smoother.targets(g)) > len(smoother.groups[g]) for g in range(groups))

    def inverses(s):
        store = s.inverses
        mats = backend.to_numpy(store.mats).astype(np.float64)
        return mats if store.row_scale is None else mats * backend.to_numpy(store.row_scale)[:, :, None]

    ref, got = inverses(ref_smoother), inverses(smoother)
    tol = 2e-3 if smoother.inverses.row_scale is not None else 1e-5  # float16 rows on a GPU
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()
    r = backend.asarray(np.random.default_rng(7).standard_normal(mg.levels[0].op.n))
    out, out_ref = (backend.to_numpy(m.apply(r, backend.xp.empty_like(r))) for m in (mgs, mg))
    assert np.abs(out - out_ref).max() <= 10 * tol * np.abs(out_ref).max()


def test_the_smoother_is_element_vanka_unless_lines_are_asked_for():
    """--smoother line takes lines on a level with cells over LINE_STRETCH times longer than
    thick (python -m fem3d.mesh counts such levels); element, the default, never; a bad name
    is an input error naming the setting."""
    mesh, cube = layered(3.25, 6), layered(0.0, 4)
    assert line_levels([mesh, cube]) == 1
    system, _, _ = assembled(mesh, get_backend("cpu"))
    kinds = {kind: smoother_for(system.op, mesh, system.valence, np.float32, kind).name for kind in ("element", "line")}
    assert kinds == {"element": "element Vanka", "line": "line Vanka"} and LinearOptions().smoother == "element"
    with pytest.raises(InputError, match="smoother"):
        LinearOptions(smoother="lines")
