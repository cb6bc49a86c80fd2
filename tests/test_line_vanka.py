import numpy as np
import pytest

from fem3d.solvers import line_vanka
from fem3d.solvers.line_vanka import LineVanka, element_lines, line_levels, smoother_for
from fem3d.solvers.linear import LinearOptions
from gpucfd.errors import InputError
from fem3d.discretisation.mesh import VTK_HEX8_TO_TENSOR, mesh_from_hex8
from support import assembled, sample_mesh, twisted_mesh
from gpucfd.backend import get_backend
from test_multigrid import hierarchy


def layered(grading: float, n: int = 8):
    """An n^3 file mesh of turned elements whose layers are graded toward z = 0 and 1 (3.25:
    the two layers at each wall 20.5 and 4.2 times wider than thick at n = 8)."""
    return twisted_mesh(grid=(n, n, n), jitter=0.0, grading=(0.0, 0.0, grading), seed=2)


def ring(around: int = 64, rings: int = 2):
    """``rings`` rings of ``around`` hex8 elements each (radii 1 to 1.6, height
    0.6), every element thinnest along the ring (4.2 to 5.3 times wider than thick)."""
    theta = 2 * np.pi * np.arange(around) / around
    radii = np.linspace(1.0, 1.6, rings + 1)
    verts = np.array([[r * np.cos(t), r * np.sin(t), z] for z in (0.0, 0.6) for t in theta for r in radii])
    ids = lambda a, j, c: (c * around + j % around) * (rings + 1) + a  # noqa: E731
    tensor = np.array(
        [
            [ids(i + a, j + b, c) for c in (0, 1) for b in (0, 1) for a in (0, 1)]
            for i in range(rings)
            for j in range(around)
        ]
    )
    return mesh_from_hex8(verts, tensor[:, np.argsort(VTK_HEX8_TO_TENSOR)])


@pytest.fixture
def two_layers(monkeypatch):
    """Lines through both stretched layers at each wall: LINE_STRETCH 3 (patches of 3)."""
    monkeypatch.setattr(line_vanka, "LINE_STRETCH", 3.0)


def test_lines_run_across_the_thin_layers(two_layers):
    """The lines run straight across the layers at each wall (z = 0 and 1): its two stretched
    elements and the first that is not (one way or the other); one per column at each wall,
    every stretched element on one line."""
    mesh = layered(3.25)
    lines = element_lines(mesh)
    centres = mesh.points[mesh.cells[:, 13]]
    stretched = mesh.stretches > line_vanka.LINE_STRETCH
    assert stretched.any() and not stretched.all()
    assert lines.shape == (2 * 8 * 8, 3) and (lines >= 0).all()
    on = np.sort(lines.ravel())
    assert len(np.unique(on)) == on.size and stretched[on].sum() == stretched.sum()
    for line in lines:
        steps = np.diff(centres[line], axis=0)
        assert np.allclose(steps[:, :2], 0.0, atol=1e-12) and (np.abs(steps[:, 2]) > 0).all()
        assert (np.sign(steps[:, 2]) == np.sign(steps[0, 2])).all()  # one way across
        line = line if stretched[line[0]] else line[::-1]  # a line runs either way
        assert min(centres[line[0], 2], 1.0 - centres[line[0], 2]) < 0.01  # from a wall
        assert stretched[line].tolist() == [True, True, False]
    assert element_lines(sample_mesh("box")) is None


def test_a_ring_of_thin_cells_is_cut_open_into_one_line(two_layers):
    """Cells thin along a ring join into a chain that closes on itself: it is cut open, a line
    of all but one element of each ring, each joined to the next across a face, its two ends
    apart."""
    mesh = ring()
    assert (mesh.stretches > line_vanka.LINE_STRETCH).all()
    lines = element_lines(mesh)
    assert lines.shape == (2, 63) and len(np.unique(lines)) == 126
    for line in lines:
        vertices = [set(mesh.pressure_cells[e]) for e in line]
        assert all(len(a & b) == 4 for a, b in zip(vertices[:-1], vertices[1:]))
        assert not vertices[0] & vertices[-1]


def test_a_line_lists_each_face_it_crosses_in_one_order_from_both_sides(two_layers):
    """line_orders: each element's local unknowns once; an element's back face (its first 31)
    is the unknowns, in the same order, of the previous element's face toward it (the first
    31 of the previous element's unknowns off its own back face)."""
    mesh = layered(3.25)
    system, _, _ = assembled(mesh, get_backend("cpu"))
    smoother = LineVanka(system.op, mesh, system.valence, np.float64, element_lines(mesh))
    order = smoother.order
    assert (np.sort(order, axis=1) == np.arange(89)).all()
    unknowns = np.take_along_axis(mesh.dofs()[smoother.elements], order, axis=1)
    first, counts, offsets = smoother.counts[0], smoother.counts, smoother.offsets
    for k in range(1, len(counts)):
        here = unknowns[offsets[k] : offsets[k + 1]]
        before = unknowns[offsets[k - 1] : offsets[k - 1] + counts[k]]
        ahead = before[:, :31] if k == 1 else before[:, 31:62]
        assert (here[:, :31] == ahead).all()
        assert not np.isin(here[:, 31:], before).any(axis=1).any()  # nothing else shared with it
    assert first == len(smoother.lines)


def line_reference(A, mesh, lines, weights, r):
    """The smoothing of the module docstring from the assembled matrix A (SciPy): each line's
    block solved densely, each element on no line its element block."""
    dofs = mesh.dofs()
    out = np.zeros(len(r))
    on_line = np.zeros(mesh.n_elements, dtype=bool)
    for line in lines:
        line = line[line >= 0]
        on_line[line] = True
        patch = np.unique(dofs[line])
        solution = np.linalg.solve(A[patch][:, patch].toarray(), r[patch])
        for e in line:
            out[dofs[e]] += weights[dofs[e]] * solution[np.searchsorted(patch, dofs[e])]
    for e in np.flatnonzero(~on_line):
        u = dofs[e]
        out[u] += weights[u] * np.linalg.solve(A[u][:, u].toarray(), r[u])
    return out


GAP = dict(grid=(4, 4, 8), jitter=0.0, lengths=(1.0, 1.0, 0.1), seed=2)


@pytest.mark.parametrize("name, length", [("layers", 3), ("gap", 8)])
def test_line_vanka_solves_each_line_on_the_assembled_matrix(backend, two_layers, name, length):
    """z = sum_lines W_l M_l^-1 r_l + element Vanka on the other elements, each M_l the block
    of the assembled level matrix (SciPy) on all the line's unknowns: the layers at the walls
    (lines of 3; element Vanka between them), a gap whose every cell is 20 times wider than
    thick (lines of 8 across it, no element left over), in float64."""
    mesh = layered(3.25) if name == "layers" else twisted_mesh(**GAP)
    system, _, _ = assembled(mesh, backend, kind="newton")
    lines = element_lines(mesh)
    assert lines.shape[1] == length
    smoother = LineVanka(system.op, mesh, system.valence, np.float64, lines)
    assert smoother.setup()
    r = np.random.default_rng(2).standard_normal(system.n)
    ref = line_reference(system.op.to_scipy().tocsr(), mesh, lines, 1.0 / backend.to_numpy(system.valence), r)
    got = backend.to_numpy(smoother.apply(backend.asarray(r), backend.xp.empty(system.n)))
    assert np.linalg.norm(got - ref) <= 1e-10 * np.linalg.norm(ref)


@pytest.mark.parametrize("groups", [1, 5])
def test_line_vanka_summed_in_slabs_and_streamed_matches_the_stored_one(backend, monkeypatch, groups):
    """The finest level's line Vanka with its blocks summed in one target group or in five
    (slabs, each holding its lines whole), from stored matrices and from matrices computed
    chunk by chunk (partial assembly): the same inverses and line eliminations (to float32
    sums in another order) and cycle."""
    from fem3d.solvers import vanka as vanka_module

    mesh = layered(3.25, 6)
    monkeypatch.setattr(vanka_module, "GROUP", -(-mesh.n_elements // groups))
    _, mg, _ = hierarchy(backend, mesh=mesh, re=50.0, levels=1, smoother="line")
    _, mgs, _ = hierarchy(backend, mesh=mesh, re=50.0, levels=1, assembly="partial", smoother="line")
    smoother, ref_smoother = mgs.levels[0].smoother, mg.levels[0].smoother
    assert isinstance(smoother, LineVanka) and len(smoother.groups) == groups
    assert sum(len(g) for g in smoother.groups) == mesh.n_elements
    for g, group in enumerate(smoother.groups):  # every line in the group of its first element
        group = set(backend.to_numpy(group).tolist())
        for line in smoother.lines[smoother._lines_of[g]]:
            assert set(line[line >= 0].tolist()) <= group

    def stored(s):
        store = s.inverses
        mats = backend.to_numpy(store.mats).astype(np.float64)
        if store.row_scale is not None:
            mats = mats * backend.to_numpy(store.row_scale)[:, :, None]
        return [mats] + [backend.to_numpy(a).astype(np.float64) for a in (s.first_inverse, s.inverse, s.below, s.above)]

    half = smoother.inverses.row_scale is not None  # element Vanka's inverses in float16 rows (a GPU)
    for k, (ref, got) in enumerate(zip(stored(ref_smoother), stored(smoother))):
        tol = 2e-3 if half and k == 0 else 1e-4  # the lines' eliminations in float32 on both backends
        assert np.abs(got - ref).max() <= tol * np.abs(ref).max(), k
    r = backend.asarray(np.random.default_rng(7).standard_normal(mg.levels[0].op.n))
    out, out_ref = (backend.to_numpy(m.apply(r, backend.xp.empty_like(r))) for m in (mgs, mg))
    assert np.abs(out - out_ref).max() <= (2e-2 if half else 1e-3) * np.abs(out_ref).max()


def test_the_smoother_takes_lines_where_cells_are_long_unless_element_vanka_is_asked_for():
    """--smoother line, the default, takes lines on a level with cells over LINE_STRETCH times
    longer than thick (python -m fem3d.mesh counts such levels) and element Vanka on the
    others; element never takes lines; a bad name is an input error naming the setting."""
    mesh, cube = layered(3.25, 6), layered(0.0, 4)
    assert line_levels([mesh, cube]) == 1
    cpu = get_backend("cpu")
    system, _, _ = assembled(mesh, cpu)
    kinds = {kind: smoother_for(system.op, mesh, system.valence, np.float32, kind).name for kind in ("element", "line")}
    assert kinds == {"element": "element Vanka", "line": "line Vanka"} and LinearOptions().smoother == "line"
    system, _, _ = assembled(cube, cpu)
    assert smoother_for(system.op, cube, system.valence, np.float32, "line").name == "element Vanka"
    with pytest.raises(InputError, match="smoother"):
        LinearOptions(smoother="lines")
