"""Monolithic geometric multigrid (fem3d.solvers.multigrid, fem3d.solvers.vanka) and the mg solver,
checked against assembled SciPy matrices, exact interpolation and the paper solver."""

import numpy as np
import pytest

from gpucfd.options import build, command_line
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from gpucfd.backend import get_backend
from gpucfd.errors import InputError
from fem3d.problems.exact import TrigFlow
from fem3d.solvers.krylov import FGMRES
from fem3d.discretisation.mesh import box_mesh
from fem3d.solvers.multigrid import (
    coarse_elements,
    COARSE_MAX,
    Multigrid,
    alignment,
    box_unknowns,
    child_prolongations,
    coarse_grids,
    coarse_levels,
    coarsest_size,
    distributed_grids,
    split,
)
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
from fem3d.problems.lid_driven import lid_driven_problem
from fem3d.discretisation.refine import refine
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from support import assembled, sample_mesh, twisted_mesh


def hierarchy(
    backend, n=4, re=200.0, kind="newton", grading=0.0, mesh=None, levels=None, assembly="element", smoother="element"
):
    """Multigrid for the equations of TrigFlow on an n^3 box (or ``mesh``), linearised
    (``kind``) about the exact flow at the nodes: a smooth state, as Newton meets it;
    ``levels`` coarser levels (default coarse_levels), smoothed by ``smoother``."""
    mesh = box_mesh(n, grading=grading) if mesh is None else mesh
    case = TrigFlow(re)
    problem = FlowProblem.with_boundary_velocity(mesh, re, lambda x: case.velocity(np, x), force=case.force)
    system = NavierStokesSystem(problem, backend, assembly=assembly)
    u = case.velocity(np, mesh.points)
    x = np.concatenate([u[:, 0], u[:, 1], u[:, 2], case.pressure(np, mesh.points[mesh.pressure_nodes])])
    state = system.assemble(backend.asarray(x), kind)
    mg = Multigrid(system, coarse_levels(mesh) if levels is None else levels, smoother=smoother)
    assert mg.setup()
    return system, mg, state


MESHES = {
    "graded box": lambda: box_mesh(4, grading=1.0),
    "refined twisted": lambda: refine(twisted_mesh(2)),
    "graded 5^3 box": lambda: box_mesh(5, grading=1.0),
    "6x5x7 box": lambda: box_mesh(6, 5, 7),
    "3x2x5 box": lambda: box_mesh(3, 2, 5),
    "twisted file mesh": lambda: twisted_mesh(6),
}
ODD = [(5, 5, 5), (7, 7, 7), (9, 9, 9), (6, 5, 7), (3, 2, 5)]


def prolongation_matrix(mg, k=0):
    """Level k's prolongation as a SciPy matrix, column by column from Level.prolong."""
    fine, coarse = mg.levels[k], mg.levels[k + 1]
    b = fine.op.backend
    cols = []
    for j in range(coarse.op.n):
        e = b.xp.zeros(coarse.op.n)
        e[j] = 1.0
        cols.append(b.to_numpy(fine.prolong(coarse, e)))
    return sp.csr_matrix(np.array(cols).T)


def test_coarse_grids_and_alignment():
    """Every side of more than 2 elements to half rounded up until at most COARSE_MAX unknowns,
    the odd side's whole layer in the middle, on any number of ranks; under MPI the most leading
    boxes that halve the slab axis with at least 2 layers per rank whose layers cut in slabs give
    a rank at most 1.1 times the mean stay partitioned."""
    assert [coarse_grids((n, n, n)) for n in (2, 5, 6, 9)] == [[], [], [(3, 3, 3)], [(5, 5, 5)]]
    assert coarse_grids((11, 11, 11)) == [(6, 6, 6), (3, 3, 3)] and coarse_grids((6, 5, 7)) == [(3, 3, 4)]
    assert coarse_grids((200, 2, 2)) == [(100, 2, 2), (50, 2, 2), (25, 2, 2)]
    for n in range(6, 101):
        grids = coarse_grids((n, n, n))
        assert grids and box_unknowns(grids[-1]) <= COARSE_MAX < box_unknowns(([(n, n, n)] + grids)[-2]), n
    assert coarse_grids((40, 40, 40)) == [(20, 20, 20), (10, 10, 10), (5, 5, 5)]
    assert [distributed_grids((40, 40, 40), p) for p in (1, 2, 3, 4, 5, 6, 8)] == [3, 2, 1, 1, 2, 0, 0]
    assert [distributed_grids((112, 112, 112), p) for p in (2, 3, 4, 8)] == [3, 3, 2, 1]  # 14, 14, 28 and 56 slab units
    assert distributed_grids((12, 12, 12), 3) == 1  # 12 and 6 units on 3 ranks balanced, 3 fewer than 2 per rank
    assert distributed_grids((20, 20, 20), 6) == 0  # 20 units on 6 ranks: 1.2 times the mean, 10: fewer than 2 per rank
    assert distributed_grids((42, 42, 42), 2) == 1 and distributed_grids((9, 9, 9), 2) == 0  # 21 and 9 layers: odd
    assert distributed_grids((9, 10, 2), 2) == 0  # (5, 5, 2): the longest side would no longer be the slab axis
    assert coarse_grids(None) == [] and coarse_levels(box_mesh(9)) == 1 and coarse_levels(refine(box_mesh(9))) == 2
    assert (
        alignment(box_mesh(40), 3) == 2 and alignment(box_mesh(8), 1) == 1 and alignment(refine(box_mesh(42)), 2) == 2
    )
    assert coarsest_size(box_mesh(40)) == (125, box_unknowns((5, 5, 5))) and coarsest_size(refine(twisted_mesh(3))) == (
        27,
        3 * 7**3 + 4**3,
    )
    parent, position = split(9)  # the whole layer's index 2 modulo 4 (nearest the middle): an odd coarse layer
    assert parent.tolist() == [0, 0, 1, 2, 2, 3, 3, 4, 4] and position.tolist() == [0, 1, 2, 0, 1, 0, 1, 0, 1]
    assert [p.tolist() for p in split(2)] == [[0, 1], [2, 2]] and split(3)[1].tolist() == [0, 1, 2]
    assert [int(np.flatnonzero(split(n)[1] == 2)[0]) for n in (11, 21, 41, 43)] == [6, 10, 18, 22]


def test_child_prolongations_reproduce_parent_polynomials():
    """P_c maps the parent's nodal values of a triquadratic (velocity) and trilinear
    (pressure) function to the child's nodal values of the same function, for the 27
    positions (lower half, upper half or whole parent along each axis)."""
    from fem3d.discretisation.element import Q1, Q2

    f = lambda p: 1 + p[:, 0] ** 2 - 2 * p[:, 1] * p[:, 2] + p[:, 0] * p[:, 1] ** 2 * p[:, 2] ** 2  # noqa: E731
    g = lambda p: 2 - p[:, 0] + 3 * p[:, 0] * p[:, 1] * p[:, 2]  # noqa: E731
    P = child_prolongations()
    for c in range(27):
        lo = np.array([[-1.0, 0.0, -1.0][a] for a in (c % 3, c // 3 % 3, c // 9)])
        hi = np.array([[0.0, 1.0, 1.0][a] for a in (c % 3, c // 3 % 3, c // 9)])
        parent = np.concatenate([f(Q2.nodes)] * 3 + [g(Q1.nodes)])
        child = np.concatenate([f(lo + (Q2.nodes + 1) * (hi - lo) / 2)] * 3 + [g(lo + (Q1.nodes + 1) * (hi - lo) / 2)])
        assert np.allclose(P[c] @ parent, child, atol=1e-13)


@pytest.mark.parametrize("name", MESHES)
def test_galerkin_coarse_matrix_is_p_transpose_a_p(name):
    """The element-local coarse matrices, assembled, equal P^T A P of the assembled fine
    matrix with prescribed unknowns left out of P (their rows: the paper's 1/S_k, summed 1),
    to the float32 rounding they are stored in (the finest level: the system's matrices
    rounded), and restriction is P^T; on boxes (odd sides: parents of 1, 2, 4 and 8
    children), on a refined mesh whose elements meet in many orientations, and on a file
    mesh coarsened by its sheets, whose children are turned in their parents."""
    cpu = get_backend("cpu")
    system, mg, _ = hierarchy(cpu, mesh=MESHES[name](), levels=1)
    fine, coarse = mg.levels[0], mg.levels[1]
    P = prolongation_matrix(mg)
    A = system.op.to_scipy()
    assert fine.op.mats.dtype == coarse.op.mats.dtype == np.float32
    assert abs(fine.op.to_scipy() - A).max() <= 1e-7 * abs(A).max()
    Ac = coarse.op.to_scipy().toarray()
    ref = (P.T @ A @ P).toarray()
    fixed = cpu.to_numpy(coarse.fixed)
    ref[fixed, :] = 0.0
    ref[fixed, fixed] = 1.0
    assert fixed.sum() > 0 and np.abs(Ac - ref).max() < 2e-6 * np.abs(ref).max()
    r = np.random.default_rng(1).standard_normal(fine.op.n)
    assert np.allclose(cpu.to_numpy(fine.restrict(coarse, r)), P.T @ r, atol=1e-12)
    assert np.all(P[cpu.to_numpy(fine.fixed)].toarray() == 0.0)


@pytest.mark.parametrize("grid", [(4, 4, 4)] + ODD, ids=lambda g: "x".join(map(str, g)))
def test_prolongation_interpolates_the_coarse_fields_on_a_uniform_box(grid):
    """A triquadratic velocity vanishing on the walls and a trilinear pressure, given at
    the coarse nodes, come out exactly at the fine nodes, also where a side is odd."""
    cpu = get_backend("cpu")
    _, mg, _ = hierarchy(cpu, mesh=box_mesh(*grid), levels=1)
    fine, coarse = mg.levels[0], mg.levels[1]
    f = lambda p: np.prod(p * (1 - p), axis=1)  # noqa: E731
    g = lambda p: 1 + p[:, 0] - 2 * p[:, 0] * p[:, 1] * p[:, 2]  # noqa: E731
    cm, fm = coarse.mesh, fine.mesh
    assert cm.grid == tuple((n + 1) // 2 if n > 2 else n for n in grid)
    xc = np.concatenate([f(cm.points)] * 3 + [g(cm.points[cm.pressure_nodes])])
    xf = np.concatenate([f(fm.points)] * 3 + [g(fm.points[fm.pressure_nodes])])
    assert np.abs(fine.prolong(coarse, xc) - xf).max() < 1e-14


@pytest.mark.parametrize("name", ["graded box", "refined twisted", "graded 5^3 box"])
def test_vanka_blocks_and_application_match_the_assembled_matrix(backend, name):
    system, mg, _ = hierarchy(backend, mesh=MESHES[name](), levels=1)
    level = mg.levels[0]
    A = level.op.to_scipy().tocsr()  # the finest level's matrices: the system's rounded to float32
    dofs = backend.to_numpy(level.op.dofs)
    vanka = level.smoother
    vanka.begin()
    vanka.open(0)
    vanka.add(level.op.mats)
    blocks = backend.to_numpy(vanka._scratch)  # the blocks of the one target group: every element
    assert len(vanka.groups) == 1 and len(blocks) == len(dofs)
    for e in (0, 7, 30, len(dofs) - 1):
        assert np.abs(blocks[e] - A[dofs[e]][:, dofs[e]].toarray()).max() < 1e-6 * abs(A).max()
    vanka.close(0)
    assert vanka.end()
    r = np.random.default_rng(2).standard_normal(level.op.n)
    w = 1.0 / backend.to_numpy(level.valence)
    ref = np.zeros(level.op.n)
    for e in range(len(dofs)):
        ref[dofs[e]] += w[dofs[e]] * np.linalg.solve(A[dofs[e]][:, dofs[e]].toarray(), r[dofs[e]])
    got = backend.to_numpy(level.smoother.apply(backend.asarray(r), backend.xp.empty(level.op.n)))
    half = vanka.inverses.row_scale is not None  # float16 inverses scaled per row (a GPU), else float32
    assert np.abs(got - ref).max() < (1e-3 if half else 1e-5) * np.abs(ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, out_dtype", [(np.float64, np.float64), (np.float32, np.float32), (np.float64, np.float32)]
)
@pytest.mark.parametrize("name", ["box", "refined annulus"])
def test_vanka_blocks_kernel_matches_the_numpy_reference(dtype, out_dtype, name):
    """fem3d.kernels.vanka: the CUDA kernel adds the same to the blocks as the NumPy reference,
    on a 6x4x2 box and on the refined hex27 annulus (neighbours meeting in several
    orientations), for a chunk of scattered elements given in shuffled order."""
    from gpucfd.backend import cupy_module
    from fem3d.kernels import vanka as kernels
    from fem3d.solvers.vanka import element_neighbours

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    mesh = box_mesh(6, 4, 2) if name == "box" else refine(sample_mesh("annulus"))
    table = element_neighbours(mesh)
    for host, device in zip(table, element_neighbours(mesh, cp)):  # the neighbour table sorted on the GPU: the same
        assert device.dtype == host.dtype and np.array_equal(device.get(), host)
    rng = np.random.default_rng(3)
    ids = rng.permutation(mesh.n_elements)[: mesh.n_elements // 2]
    slot = np.full(mesh.n_elements, -1, dtype=np.int32)
    slot[ids] = np.arange(len(ids))
    A = rng.standard_normal((len(ids), 89, 89)).astype(dtype)
    targets = np.sort(rng.permutation(mesh.n_elements)[: mesh.n_elements - 4]).astype(np.int32)
    start = rng.standard_normal((len(targets), 89, 89)).astype(out_dtype)
    ref = start.copy()
    kernels.accumulate_numpy(A, slot, targets, *table, ref)
    got = cp.asarray(start)
    kernels.accumulate_cuda(cp.asarray(A), cp.asarray(slot), cp.asarray(targets), *(cp.asarray(a) for a in table), got)
    tol = 1e-12 if out_dtype == np.float64 else 2e-6
    assert np.abs(got.get() - ref).max() <= tol * np.abs(ref).max()
    assert np.abs(ref - start).max() > 1.0  # the chunk did add


def test_vanka_blocks_from_chunks_equal_those_from_all_elements():
    """Blocks of some target elements summed from element matrices given in chunks of any
    order (a level whose matrices are not stored) equal those of all elements summed from
    all at once."""
    from fem3d.kernels import vanka as kernels
    from fem3d.solvers.vanka import element_neighbours

    mesh = refine(sample_mesh("annulus"))
    table = element_neighbours(mesh)
    A = np.random.default_rng(4).standard_normal((mesh.n_elements, 89, 89))
    every = np.arange(mesh.n_elements, dtype=np.int32)
    whole = np.zeros((mesh.n_elements, 89, 89))
    kernels.accumulate_numpy(A, every, every, *table, whole)
    targets = np.sort(np.random.default_rng(6).permutation(mesh.n_elements)[:10]).astype(np.int32)
    chunks = np.zeros((len(targets), 89, 89))
    for ids in np.array_split(np.random.default_rng(5).permutation(mesh.n_elements), 3):
        slot = np.full(mesh.n_elements, -1, dtype=np.int32)
        slot[ids] = np.arange(len(ids))
        kernels.accumulate_numpy(A[ids], slot, targets, *table, chunks)
    assert np.abs(chunks - whole[targets]).max() < 1e-13 * np.abs(whole).max()
    own = np.einsum("eii->e", A)
    assert np.abs(np.einsum("eii->e", whole) - own).max() > 1.0  # the neighbours' entries are in


def stored_inverses(vanka):
    """The smoother's weighted inverses (E, NL, NL) float64 on the host (float16 rows scaled back)."""
    b, store = vanka.op.backend, vanka.inverses
    mats = b.to_numpy(store.mats)[:, :, :89].astype(np.float64)
    return mats if store.row_scale is None else mats * b.to_numpy(store.row_scale)[:, :, None]


@pytest.mark.parametrize("groups", [1, 5])
def test_streamed_finest_level_matches_the_stored_one(backend, monkeypatch, groups):
    """A sum-factorised system's finest level (element matrices computed chunk by chunk at
    the set-up, none kept) gives the hierarchy of the stored one: the same smoother inverses
    and coarse Galerkin matrices (to float32 sums in another order) and cycle, with the
    smoother's blocks summed in one target group or in five slabs (each with its halo)."""
    from fem3d.solvers import vanka as vanka_module

    mesh = refine(twisted_mesh(2))
    monkeypatch.setattr(vanka_module, "GROUP", -(-mesh.n_elements // groups))
    stored, mg, _ = hierarchy(backend, mesh=mesh, levels=1)
    streamed, mgs, _ = hierarchy(backend, mesh=mesh, levels=1, assembly="partial")
    fine = mgs.levels[0]
    assert fine.op is streamed.op and streamed.elements is None and len(fine.smoother.groups) == groups
    members = [backend.to_numpy(g) for g in fine.smoother.groups]
    assert np.array_equal(np.sort(np.concatenate(members)), np.arange(mesh.n_elements))
    for g, group in enumerate(members):
        halo = backend.to_numpy(fine.smoother.halo(g))
        assert (len(halo) == 0) == (groups == 1) and not np.isin(halo, group).any()
    ref, got = stored_inverses(mg.levels[0].smoother), stored_inverses(fine.smoother)
    tol = 2e-3 if fine.smoother.inverses.row_scale is not None else 1e-5  # float16 rows on a GPU
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()
    coarse, coarse_ref = (backend.to_numpy(m.levels[1].op.mats) for m in (mgs, mg))
    assert np.abs(coarse - coarse_ref).max() <= 1e-6 * np.abs(coarse_ref).max()
    r = backend.asarray(np.random.default_rng(7).standard_normal(fine.op.n))
    out, out_ref = (backend.to_numpy(m.apply(r, backend.xp.empty_like(r))) for m in (mgs, mg))
    assert np.abs(out - out_ref).max() <= 10 * tol * np.abs(out_ref).max()


def random_blocks(dtype):
    """Seven well-conditioned 89 x 89 blocks."""
    return (np.random.default_rng(4).standard_normal((7, 89, 89)) + 12 * np.eye(89)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_inverses_match_numpy_and_flag_singular_blocks(dtype):
    """fem3d.kernels.vanka.invert_numpy (LU and getri per block) equals numpy.linalg.inv
    and raises LinAlgError on a singular block."""
    from fem3d.kernels.vanka import invert_numpy

    blocks = random_blocks(dtype)
    ref = np.linalg.inv(blocks.astype(np.float64))
    got = invert_numpy(blocks)
    assert got.dtype == dtype and np.abs(got - ref).max() < (1e-13 if dtype == np.float64 else 1e-5) * np.abs(ref).max()
    blocks[3, 10] = 0.0
    blocks[3, :, 10] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular block 3"):
        invert_numpy(blocks)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_inverses_on_the_gpu_match_the_numpy_reference(dtype):
    from gpucfd.backend import cupy_module
    from fem3d.kernels.vanka import invert_cuda, invert_numpy

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    blocks = random_blocks(dtype)
    ref = invert_numpy(blocks)
    got = invert_cuda(cupy_module().asarray(blocks)).get()
    assert got.dtype == dtype and np.abs(got - ref).max() < (1e-12 if dtype == np.float64 else 1e-5) * np.abs(ref).max()


def saddle_blocks(dtype):
    """Seven 89 x 89 blocks shaped like the Vanka blocks of Q2-Q1 elements: a zero 8 x 8
    pressure block (the velocity block shifted to be well-conditioned), last as the element
    orders its unknowns (blocks 0-3) or first (blocks 4-6: the first pivots must come from
    other rows)."""
    blocks = np.random.default_rng(6).standard_normal((7, 89, 89))
    blocks[:, :81, :81] += 12 * np.eye(81)
    blocks[:, 81:, 81:] = 0.0
    first = np.r_[81:89, :81]
    blocks[4:] = blocks[4:][:, first][:, :, first]
    return blocks.astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_saddle_point_blocks_are_inverted_on_the_gpu_with_pivoting(dtype):
    """fem3d.kernels.vanka.invert_cuda equals numpy.linalg.inv, block by block, on blocks with
    a zero diagonal block (condition numbers up to 600: in float32 LAPACK's getrf and getri
    are 7e-6 off)."""
    from gpucfd.backend import cupy_module
    from fem3d.kernels.vanka import invert_cuda

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    blocks = saddle_blocks(dtype)
    ref = np.linalg.inv(blocks.astype(np.float64))
    got = invert_cuda(cupy_module().asarray(blocks)).get()
    tol = 1e-12 if dtype == np.float64 else 2e-5
    assert got.dtype == dtype and (np.abs(got - ref).max(axis=(1, 2)) < tol * np.abs(ref).max(axis=(1, 2))).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_singular_block_on_the_gpu_has_non_finite_entries_and_the_others_are_right(dtype):
    """fem3d.kernels.vanka.invert_cuda on a batch with a singular block (a zero row and
    column): non-finite entries in that block, which fem3d.solvers.vanka.Vanka.setup detects;
    the other blocks finite and equal to the NumPy reference."""
    from gpucfd.backend import cupy_module
    from fem3d.kernels.vanka import invert_cuda, invert_numpy

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    blocks = random_blocks(dtype)
    blocks[3, 10] = 0.0
    blocks[3, :, 10] = 0.0
    got = invert_cuda(cupy_module().asarray(blocks)).get()
    assert not np.isfinite(got[3]).all()
    others = np.arange(len(blocks)) != 3
    ref = invert_numpy(blocks[others])
    assert np.isfinite(got[others]).all()
    assert np.abs(got[others] - ref).max() < (1e-12 if dtype == np.float64 else 1e-5) * np.abs(ref).max()


@pytest.mark.parametrize("name", ["8^3 box", "refined twisted"])
def test_coarse_solve_is_exact_up_to_the_pressure_level(backend, name):
    """The coarsest level (the 8^3 box's 4^3, or the mesh that was refined) factorised by SuperLU,
    inverted as a dense matrix and factorised densely (the GPU's ways up to and above DENSE_MAX
    unknowns) solves A x = A z as numpy.linalg.solve does, and gives z up to the pressure level."""
    _, mg, _ = hierarchy(backend, mesh=box_mesh(8) if name == "8^3 box" else MESHES[name]())
    coarse, direct = mg.levels[-1], mg.direct
    A = coarse.op.to_scipy()
    x = np.random.default_rng(5).standard_normal(coarse.op.n)
    x[backend.to_numpy(coarse.fixed)] = 0.0
    pin = 3 * coarse.mesh.n_nodes
    dense = A.toarray()
    dense[pin, :], dense[:, pin], dense[pin, pin] = 0.0, 0.0, 1.0
    b = A @ x
    b[pin] = 0.0
    ref = np.linalg.solve(dense, b)
    for direct.method in ("superlu", "inverse", "lu"):
        direct.setup()
        got = backend.to_numpy(direct.solve(backend.asarray(A @ x)))
        assert direct.pin == pin and np.abs(got - ref).max() < 1e-10 * np.abs(x).max()
        p = slice(pin, None)
        got[p] += (x[p] - got[p]).mean()
        assert np.abs(got - x).max() < 1e-6 * np.abs(x).max()


def test_auto_never_takes_the_paper_solver(monkeypatch):
    """auto is mg on a file mesh of 29,114 unknowns with no coarser file mesh (its sheets
    paired down to 125 elements: 4,209 unknowns solved directly); where mg cannot run it is an
    input error naming the change (one element; a coarsest level whose factors would not fit:
    the free memory faked small), and the paper solver runs only when asked for."""
    big = twisted_mesh(10)
    assert (
        LinearOptions().for_mesh(big).solver == "mg" and coarse_levels(big) == 1 and coarsest_size(big) == (125, 4209)
    )
    with pytest.raises(
        InputError,
        match=r"^--solver auto: the mesh has one element, too few for multigrid: refine it; "
        r"or use --solver paper, much slower$",
    ):
        build(LinearOptions, {}, command_line).for_mesh(box_mesh(1))
    for free in (60e6, 4e6):
        monkeypatch.setattr("fem3d.solvers.multigrid.host_free_bytes", lambda: free)
        monkeypatch.setattr("fem3d.solvers.linear.host_free_bytes", lambda: free)
        if free > 30e6:
            assert LinearOptions().for_mesh(big).solver == "mg"  # 4,209 unknowns: about 22 MB of factors
    with pytest.raises(
        InputError,
        match=r"^solver= mg: the coarsest level of the multigrid hierarchy has 1,093 unknowns "
        r"\(27 elements\), whose direct solve needs about 0.0023 GB, more than half the 0.004 "
        r"GB free: give a coarser mesh \(about [23][0-9] elements at most\) and --refine K; "
        r"or use solver= paper, much slower$",
    ):
        LinearOptions(solver="mg").for_mesh(refine(sample_mesh("distorted")))
    for mesh in (box_mesh(1), refine(sample_mesh("distorted"))):
        assert LinearOptions(solver="paper").for_mesh(mesh).solver == "paper"


def test_a_singular_coarsest_level_fails_the_set_up_instead_of_raising(backend):
    """One element with its velocity prescribed: the direct solve alone meets a singular
    matrix (spurious pressure modes), so the set-up reports failure (the linear solver then
    reports a breakdown) on either coarse path."""
    mesh = box_mesh(1)
    problem = FlowProblem.with_boundary_velocity(mesh, 10.0, lambda x: np.zeros((len(x), 3)))
    system = NavierStokesSystem(problem, backend)
    system.assemble(system.initial_guess(), "newton")
    mg = Multigrid(system, 0)
    for mg.direct.method in ("superlu", "inverse", "lu"):
        assert not mg.setup()
    assert LinearOptions().for_mesh(box_mesh(3)).solver == "mg"


def test_fgmres_with_multigrid_solves_the_newton_system_in_few_iterations():
    """Jacobian at Re 200 about the manufactured flow on an 8^3 graded box, consistent
    right-hand side A z (z zero where prescribed): relative residual 1e-8 in under 40
    iterations (32 when written), the solution z up to the pressure level (what scipy's
    spsolve gives)."""
    cpu = get_backend("cpu")
    system, mg, state = hierarchy(cpu, n=8, grading=1.0)
    A = system.op.to_scipy().tocsc()
    z = np.random.default_rng(4).standard_normal(system.n)
    z[system.fixed] = 0.0
    rhs = A @ z
    info = FGMRES(1e-8, 50, 200).solve(system.op, rhs, x := np.zeros(system.n), mg)
    assert info.converged and info.iterations < 40, info
    k = 3 * system.mesh.n_nodes
    J = A.tolil()
    J[k, :] = 0.0
    J[k, k] = 1.0
    b = rhs.copy()
    b[k] = 0.0
    ref = spla.spsolve(J.tocsc(), b)
    x[k:] += (ref[k:] - x[k:]).mean()
    assert np.linalg.norm(x - ref) < 1e-6 * np.linalg.norm(ref)


def test_newton_with_mg_converges_quadratically_on_the_manufactured_flow():
    case = TrigFlow(50.0)
    mesh = box_mesh(4)
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x), force=case.force)
    system = NavierStokesSystem(problem, get_backend("cpu"))
    linear = make_linear_solver(LinearOptions(solver="mg"))
    result = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-12, forcing=1e-10)).solve()
    r = [s.residual for s in result.steps] + [result.residual]
    assert result.converged and len(r) <= 8 and r[-4] < 0.05, r
    for prev, new in zip(r[-4:-1], r[-3:]):
        assert new < 50.0 * prev**2, r


@pytest.mark.parametrize(
    "mesh, re, levels",
    [(lambda: box_mesh(6, grading=1.0), 400.0, 2), (lambda: refine(twisted_mesh(2), 2), 100.0, 3)],
    ids=["6^3 graded box", "twisted 2^3 refined twice"],
)
def test_mg_and_paper_solvers_give_the_same_cavity_flow(mesh, re, levels):
    """The cavity at Re 400 on a graded 6^3 box (two levels, 6^3 over 3^3) and at Re 100 on
    a refined mesh whose neighbours meet in many orientations (the jittered 2^3 refined
    twice: three levels, the smallest such mesh): both solvers to residual 1e-9; the
    velocities agree to 1e-7 and mg takes under a tenth of the paper solver's iterations
    (17 and 730, 10 and 550 when written)."""
    cpu = get_backend("cpu")
    mesh = mesh()
    xs, its = {}, {}
    for name in ("mg", "paper"):
        system = NavierStokesSystem(lid_driven_problem(mesh, re, "y=1"), cpu)
        linear = make_linear_solver(LinearOptions(solver=name).for_mesh(mesh))
        result = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-9, newton=1.0)).solve()
        assert result.converged
        xs[name], its[name] = result.x, result.linear_iterations
        if name == "mg":
            assert len(linear.mg.levels) == levels
    v = slice(0, 3 * mesh.n_nodes)
    assert np.abs(xs["mg"][v] - xs["paper"][v]).max() < 1e-7
    assert its["mg"] * 10 < its["paper"], its


def test_a_boundary_layer_of_thin_cells_takes_no_more_iterations_than_the_cube():
    """The Newton system at Re 50 about the manufactured flow on a file mesh of 8^3 turned
    elements, solved to 1e-8 from a consistent right-hand side: with its layers graded toward
    the walls z = 0 and 1 so that the wall cells are 20 times wider than thick (their sheets
    paired along z alone first: semi-coarsening) and line Vanka (--smoother line) on the
    levels with such cells (its hierarchy built from the Jacobian with frozen test functions;
    from the Picard matrix instead: 17), FGMRES takes no more iterations than on the uniform
    cube: 6 and 7 when written; element Vanka on both took 11 and 7."""
    cpu = get_backend("cpu")
    its = {}
    for grading in (0.0, 3.25):
        mesh = twisted_mesh(grid=(8, 8, 8), jitter=0.0, grading=(0.0, 0.0, grading), seed=2)
        system, mg, _ = hierarchy(cpu, mesh=mesh, re=50.0, smoother="line")
        z = np.random.default_rng(5).standard_normal(system.n)
        z[system.fixed] = 0.0
        info = FGMRES(1e-8, 50, 200).solve(system.op, system.op.to_scipy() @ z, np.zeros(system.n), mg)
        assert info.converged
        its[grading] = (info.iterations, [level.op.dofs.shape[0] for level in mg.levels], mesh.stretches.max())
        assert mg.levels[0].smoother.name == ("line Vanka" if grading else "element Vanka")
        assert mg.kind == ("frozen" if grading else "newton")  # lines: the hierarchy of frozen test functions
    assert its[0.0][1] == [512, 64] and its[3.25][1][1] == 384 and its[3.25][2] > 20, (
        its
    )  # the wall layers paired first
    assert its[3.25][0] <= its[0.0][0], its


def test_lines_across_a_thin_gap_take_as_few_iterations_as_the_cube():
    """A gap with walls on both sides whose every cell is 20 times wider than thick (8^3
    turned elements, 1 x 1 x 0.05): lines run across it whole, and the Newton system at Re 50
    about the manufactured flow takes no more FGMRES iterations to 1e-8 than the uniform cube
    (2 and 7 when written; element Vanka, or lines of three elements, over 300)."""
    cpu = get_backend("cpu")
    mesh = twisted_mesh(grid=(8, 8, 8), jitter=0.0, lengths=(1.0, 1.0, 0.05), seed=2)
    system, mg, _ = hierarchy(cpu, mesh=mesh, re=50.0, smoother="line")
    assert mg.levels[0].smoother.lines.shape == (64, 8)  # one line per column, across the gap
    z = np.random.default_rng(5).standard_normal(system.n)
    z[system.fixed] = 0.0
    info = FGMRES(1e-8, 50, 20).solve(system.op, system.op.to_scipy() @ z, np.zeros(system.n), mg)
    assert info.converged and info.iterations <= 4, info.iterations


def test_odd_boxes_take_as_many_fgmres_iterations_as_their_even_neighbours():
    """The Newton system at Re 200 about the manufactured flow on graded 6^3, 7^3 and 8^3
    boxes (7 -> 4 leaves a middle layer whole), solved to 1e-8 as in
    test_fgmres_with_multigrid_solves_the_newton_system_in_few_iterations: auto takes mg on
    each, and 7^3 needs at most 2 iterations more than the worse of its neighbours (6^3, 7^3,
    8^3: 14, 12, 14 when written)."""
    cpu = get_backend("cpu")
    its = {}
    for n in (6, 7, 8):
        system, mg, _ = hierarchy(cpu, n=n, grading=1.0)
        assert LinearOptions().for_mesh(system.mesh).solver == "mg" and len(mg.levels) == 2
        z = np.random.default_rng(4).standard_normal(system.n)
        z[system.fixed] = 0.0
        info = FGMRES(1e-8, 50, 200).solve(system.op, system.op.to_scipy() @ z, np.zeros(system.n), mg)
        assert info.converged
        its[n] = info.iterations
    assert its[7] <= max(its[6], its[8]) + 2, its


def test_solver_choice_and_bad_options():
    auto = LinearOptions(solver="auto")
    assert LinearOptions().solver == "auto"
    assert auto.for_mesh(box_mesh(4)).solver == "mg" and auto.for_mesh(box_mesh(8, 4, 4)).solver == "mg"
    assert auto.for_mesh(box_mesh(9)).solver == "mg" and auto.for_mesh(box_mesh(6, 5, 7)).solver == "mg"
    # no coarser level, solved directly: mg is the direct solve alone
    assert auto.for_mesh(box_mesh(5)).solver == "mg" and auto.for_mesh(sample_mesh("distorted")).solver == "mg"
    assert (
        auto.for_mesh(refine(sample_mesh("distorted"))).solver == "mg"
        and auto.for_mesh(refine(box_mesh(5))).solver == "mg"
    )
    assert auto.for_mesh(refine(twisted_mesh(10))).solver == "mg"
    assert LinearOptions(solver="paper").for_mesh(box_mesh(4)).solver == "paper"
    with pytest.raises(InputError, match="^solver= mg: the mesh has one element"):
        LinearOptions(solver="mg").for_mesh(box_mesh(1))
    with pytest.raises(InputError, match="^--solver mg: the mesh has one element.*or use --solver paper"):
        build(LinearOptions, {"solver": "mg"}, command_line).for_mesh(box_mesh(1))
    with pytest.raises(InputError, match="solver= must be one of auto, mg, paper"):
        LinearOptions(solver="amg")
    with pytest.raises(InputError, match="smoothing_steps="):
        LinearOptions(smoothing_steps=0)
    with pytest.raises(InputError, match="restart="):
        LinearOptions(restart=0)


def test_singular_vanka_block_is_a_breakdown_not_a_crash():
    cpu = get_backend("cpu")
    mesh = box_mesh(6)
    system, x, state = assembled(mesh, cpu, seed=1)
    solver = make_linear_solver(LinearOptions(solver="mg"))
    system.op.mats[5, :, :] = 0.0  # an element whose block loses its pressure rows
    solver.setup(system, state)
    info = solver.solve(-state.residual, np.zeros(system.n), 1e-2)
    assert info.reason == "breakdown" and not info.relres < 1.0


@pytest.mark.gpu
def test_mg_on_cpu_and_gpu_give_the_same_solution():
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    mesh = box_mesh(6, grading=1.0)
    out = {}
    for device in ("cpu", "gpu", "gpu again"):
        system = NavierStokesSystem(lid_driven_problem(mesh, 200.0, "y=1"), get_backend(device.split()[0]))
        result = NonlinearSolver(
            system, make_linear_solver(LinearOptions(solver="mg")), NonlinearOptions(tol=1e-12, forcing=1e-10)
        ).solve()
        assert result.converged
        out[device] = result.x
    v = slice(0, 3 * mesh.n_nodes)
    assert np.abs(out["gpu"][v] - out["cpu"][v]).max() < 1e-10
    assert np.array_equal(out["gpu"], out["gpu again"])  # no atomics in the sums: every run the same bits


@pytest.mark.gpu
@pytest.mark.parametrize("n, graph_elements, graphed", [(8, None, 0), (16, 1000, 1)])
def test_cycles_replayed_from_a_cuda_graph_equal_the_direct_ones(monkeypatch, n, graph_elements, graphed):
    """On one GPU the cycle from the first level of at most GRAPH_ELEMENTS elements down is
    replayed from one CUDA graph (the whole cycle of the 8^3 box; the 16^3 box's from its 8^3
    level with the limit at 1,000): each application equals the cycle run directly, also
    after a new linearisation (new matrices at the same addresses)."""
    from gpucfd.backend import cupy_module
    from fem3d.solvers import multigrid

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    if graph_elements is not None:
        monkeypatch.setattr(multigrid, "GRAPH_ELEMENTS", graph_elements)
    gpu = get_backend("gpu")
    system, mg, state = hierarchy(gpu, n=n, grading=1.0)
    assert mg.graphed == graphed
    rng = np.random.default_rng(9)
    for k in range(4):
        if k == 2:
            system.assemble(state.residual * 0.01 + system.initial_guess(), "newton")
            assert mg.setup()
        r = gpu.asarray(rng.standard_normal(system.n)) * (1.0 - system.fixed)
        got = mg.apply(r, gpu.xp.empty_like(r)).get()
        mg.graphed = None  # the cycle run directly
        ref = mg.apply(r, gpu.xp.empty_like(r)).get()
        mg.graphed = graphed
        assert np.abs(got - ref).max() < 1e-12 * np.abs(ref).max(), k
    assert mg._graph.graph is not None


def test_the_memory_check_counts_a_hierarchy_deeper_than_a_box(monkeypatch):
    """A box's levels below it hold 1/7 of its elements, the sheet-coarsened boundary-layer
    channel's (3,360 elements) 5,840 (the level list of python -m fem3d.mesh); the memory
    check adds 70 kB on the CPU per coarse element beyond a box's share: 1 GB free holds the
    channel's mesh with a box's hierarchy (0.887 GB) but not with its own (1.26 GB), and the
    error names the elements that would fit."""
    import os

    from fem3d.discretisation.mesh import read_mesh
    from fem3d.problems import memory

    box = box_mesh(24)
    assert coarse_elements(box) == 12**3 + 6**3 + 3**3
    mesh = read_mesh(os.path.join(os.path.dirname(__file__), "..", "meshes", "dfg3d", "channel_boundary_layer.msh"))
    coarse = coarse_elements(mesh)
    assert coarse == 1920 + 1344 + 1152 + 576 + 480 + 240 + 128
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 1.0e9)
    cpu, words = get_backend("cpu"), lambda e: f"{e:,} elements fit"
    assert memory.check_fits(cpu, "float64", "mg", mesh.n_elements, 1, words) == "element"
    with pytest.raises(InputError) as error:
        memory.check_fits(cpu, "float64", "mg", mesh.n_elements, 1, words, coarse=coarse / mesh.n_elements)
    per = 245e3 + 4e3 + 70e3 * (coarse / mesh.n_elements - 1 / 7)
    assert f"need about {(0.05e9 + per * mesh.n_elements) / 2**30:.3g} GiB" in str(error.value)
    assert str(error.value).endswith(f"{int((1.0e9 - 0.05e9) // per):,} elements fit")


def test_a_refined_mesh_whose_own_hierarchy_does_not_fit_names_the_refinement_that_fits(tmp_path, monkeypatch, capsys):
    """The boundary-layer channel refined once (26,880 elements) on the CPU with 5 GB free: the
    check before reading counts a box's hierarchy and passes with partial assembly (3.65 GB),
    the run's own check counts its semi-coarsened levels (about twice its elements: 7.1 GB) and
    stops before any work, naming the refinement of the file's mesh that fits."""
    import os

    from fem3d import run
    from gpucfd.errors import run_cli

    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 5e9)
    case = os.path.join(os.path.dirname(__file__), "..", "meshes", "dfg3d", "dfg_3d_1z_boundary_layer.toml")
    code = run_cli(run.main, [case, "--refine", "1", "--device", "cpu", "--out", str(tmp_path / "out")], prog="run")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "26,880 elements need about 6.62 GiB of host memory (partial assembly), 4.66 GiB is free" in err
    assert err.rstrip().endswith("--refine 0 fits at most") and not (tmp_path / "out").exists()
