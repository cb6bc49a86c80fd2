"""Distribution over MPI ranks.

Tests marked ``mpi`` run under ``mpiexec -n 2`` and ``-n 3`` (tests/run-tests): each
rank solves its part and the results are compared with a single-process solve of the
same problem on every rank. The others run in the serial suite: partitions, and the
command lines started under mpiexec as a user would (bad input, a failing rank).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fem3d.problems.boundary import Outflow, Slip, Velocity, Wall
from fem3d.parallel.comm import launched_ranks
from fem3d.problems.distributed import partitioned_system
from gpucfd.errors import InputError
from fem3d.problems.exact import PaperFlow
from fem3d.discretisation.mesh import VTK_HEX8_TO_TENSOR, box_mesh, mesh_from_hex8
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from fem3d.solvers.operators import ElementOperator
from fem3d.parallel.partition import distribute, partition_elements
from fem3d.problems.lid_driven import lid_driven_problem
from fem3d.problems.quantities import boundary_force, point_values
from fem3d.discretisation.refine import refine
from support import assembled, sample_mesh, twisted_mesh

TIGHT = NonlinearOptions(tol=1e-11, forcing=1e-12)
LINEAR = LinearOptions(solver="paper", max_iterations=5000, check_every=5)


# ----------------------------------------------------------------- partitions (serial)


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_box_slabs_balanced_within_one_layer(parts):
    mesh = box_mesh(3, 2, 7)
    part = partition_elements(mesh, parts)
    sizes = np.bincount(part, minlength=parts)
    assert sizes.sum() == mesh.n_elements and sizes.min() > 0
    assert sizes.max() - sizes.min() <= 3 * 2  # one layer of the longest (z) axis
    k = mesh.element_ids // 6  # z layer
    assert all(np.unique(part[k == layer]).size == 1 for layer in range(7))  # whole layers


def test_element_graph_joins_elements_across_faces():
    """The distorted 6^3 cube: every pair of elements sharing a face, both ways (3 axes x 36 lines
    x 5 faces x 2), none across an edge or a corner."""
    from fem3d.parallel.partition import element_graph

    mesh = sample_mesh("distorted")
    xadj, adjncy = element_graph(mesh)
    assert len(xadj) == 217 and xadj[-1] == len(adjncy) == 3 * 36 * 5 * 2
    degree = np.diff(xadj)
    assert degree.min() == 3 and degree.max() == 6 and np.count_nonzero(degree == 6) == 4**3


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_general_mesh_graph_partition_balanced_and_cut_small(parts):
    """METIS on a general mesh (the distorted 6^3 cube): every rank gets elements, at most 1.03
    times the mean, the same partition twice; on 2 ranks the cut is one plane of 36 faces."""
    from fem3d.parallel.partition import element_graph

    mesh = sample_mesh("distorted")
    part = partition_elements(mesh, parts)
    sizes = np.bincount(part, minlength=parts)
    assert sizes.sum() == mesh.n_elements and sizes.min() > 0 and sizes.max() <= 1.03 * mesh.n_elements / parts
    assert np.array_equal(part, partition_elements(mesh, parts))
    xadj, adjncy = element_graph(mesh)
    cut = np.count_nonzero(part[np.repeat(np.arange(mesh.n_elements), np.diff(xadj))] != part[adjncy]) // 2
    if parts == 2:
        assert cut == 36


def test_graph_partition_without_pymetis_or_with_an_empty_rank_is_an_error(monkeypatch):
    import sys
    import types

    mesh = sample_mesh("distorted")
    monkeypatch.setitem(sys.modules, "pymetis", None)
    with pytest.raises(InputError, match="2 ranks on a mesh that is not a box need pymetis"):
        partition_elements(mesh, 2)
    fake = types.SimpleNamespace(
        CSRAdjacency=lambda **kw: None,
        Options=lambda **kw: None,
        part_graph=lambda parts, **kw: (0, [0] * 100 + [2] * 116),
    )
    monkeypatch.setitem(sys.modules, "pymetis", fake)
    with pytest.raises(InputError, match="216 elements for 3 ranks leaves rank 1 without elements; start fewer ranks"):
        partition_elements(mesh, 3)


class _Rank:
    """A communicator's rank and size alone (distribute_owned connects no peers here)."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def connect(self, peers):
        pass


@pytest.mark.parametrize("mesh, parts", [("box", 4), ("scattered", 5)])
def test_each_rank_finds_its_owners_and_shared_unknowns_as_a_table_of_the_whole_mesh_says(mesh, parts):
    """distribute_owned looks only at the elements of other ranks that touch its nodes; its
    owners (the lowest rank touching an unknown) and shared lists (in increasing global
    order) equal those of a node-by-rank table of the whole mesh, on box slabs and on ranks
    scattered element by element (every unknown shared, up to 8 ranks at a node); the
    interface elements come first in each colour."""
    from fem3d.parallel.partition import distribute_owned
    from gpucfd.backend import get_backend

    if mesh == "box":
        whole = box_mesh(6, 4, 5)
        ranks = partition_elements(whole, parts)
    else:
        whole = twisted_mesh(3)
        ranks = np.random.default_rng(1).integers(0, parts, whole.n_elements)
    touching = np.zeros((whole.n_nodes, parts), dtype=bool)
    touching[whole.cells, ranks[:, None]] = True
    p_touching = np.zeros((whole.n_pressure, parts), dtype=bool)
    p_touching[whole.pressure_cells, ranks[:, None]] = True
    n = whole.n_nodes
    for r in range(parts):
        part = distribute_owned(whole, ranks, _Rank(r, parts), get_backend("cpu"))
        gdofs = part.dist.gdofs
        table = np.concatenate([touching[part.nodes]] * 3 + [p_touching[gdofs[3 * len(part.nodes) :] - 3 * n]])
        assert np.array_equal(part.dist.owned, np.argmax(table, axis=1) == r)
        expected = {q: np.flatnonzero(table[:, q]) for q in range(parts) if q != r and table[:, q].any()}
        assert sorted(part.dist.shared) == sorted(expected)
        for q, idx in expected.items():
            assert np.array_equal(part.dist.shared[q], idx[np.argsort(gdofs[idx])])
        shared = (touching.sum(axis=1) > 1)[whole.cells[part.elements]].any(axis=1)
        shared |= (p_touching.sum(axis=1) > 1)[whole.pressure_cells[part.elements]].any(axis=1)
        for c in range(whole.n_colours):
            first = shared[np.searchsorted(whole.colour_offsets, part.elements, side="right") - 1 == c]
            assert not (first[1:] & ~first[:-1]).any()  # no interface element after an inner one
    assert mesh == "box" or len(expected) == parts - 1


def assert_same_part(alone, cut, fields=()):
    """Two Partitions of one rank are the same: nodes, elements (and their order), points, cells,
    pressure numbering, geometry, colours, element ids, boundary faces and tags, ``fields``,
    tag names, unknowns, owners and shared lists (the halo)."""
    assert np.array_equal(alone.nodes, cut.nodes) and np.array_equal(alone.elements, cut.elements)
    for name in (
        "points",
        "cells",
        "pressure_cells",
        "pressure_nodes",
        "geometry",
        "colour_offsets",
        "element_ids",
        "boundary_faces",
        "boundary_tags",
    ) + tuple(fields):
        assert np.array_equal(getattr(alone.mesh, name), getattr(cut.mesh, name)), name
    assert alone.mesh.tag_names == cut.mesh.tag_names
    assert np.array_equal(alone.dist.gdofs, cut.dist.gdofs) and np.array_equal(alone.dist.owned, cut.dist.owned)
    assert alone.dist.n_global == cut.dist.n_global and sorted(alone.dist.shared) == sorted(cut.dist.shared)
    assert all(np.array_equal(alone.dist.shared[q], cut.dist.shared[q]) for q in cut.dist.shared)


@pytest.mark.parametrize("grid, grading, align", [((6, 4, 5), 0.0, 1), ((5, 7, 4), 0.8, 1), ((4, 5, 12), 0.0, 2)])
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_each_rank_builds_its_box_part_alone_as_cut_from_the_whole_box(grid, grading, align, parts):
    """fem3d.parallel.partition.box_part, from the rank's slab only, gives every rank the part
    that distribute_owned cuts from the whole box's arrays: nodes, elements (and their
    order), points, cells, pressure numbering, geometry, colours, element ids, boundary faces
    and tags, unknowns, owners and shared lists (the halo); graded boxes, slabs along x, y and
    z, slabs of whole pairs of layers (multigrid's alignment)."""
    from fem3d.parallel.partition import box_part, distribute_owned
    from gpucfd.backend import get_backend

    whole = box_mesh(*grid, grading=grading)
    cpu = get_backend("cpu")
    for r in range(parts):
        cut = distribute_owned(whole, partition_elements(whole, parts, align), _Rank(r, parts), cpu)
        alone = box_part(grid, whole.box_vertices, _Rank(r, parts), cpu, align)
        assert alone.mesh.whole is None and cut.mesh.whole is whole
        assert_same_part(alone, cut)
        assert alone.mesh.grid == cut.mesh.grid
        assert len(cut.dist.shared) == (r > 0) + (r < parts - 1)  # slabs: the neighbours on each side


REFINED_PARTS = {
    "distorted": lambda: refine(sample_mesh("distorted"), 1),
    "annulus twice": lambda: refine(sample_mesh("annulus"), 2),
    "twisted": lambda: refine(twisted_mesh(3), 1),
    "box": lambda: refine(box_mesh(4, 3, 5, grading=0.5), 1),
}


@pytest.mark.parametrize("name", list(REFINED_PARTS))
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_each_rank_builds_its_refined_part_alone_as_cut_from_the_whole_mesh(name, parts):
    """fem3d.parallel.partition.refined_part, from the rank's parents only (the refined mesh's
    arrays never made), gives every rank the part that distribute_owned cuts from the whole
    refined mesh's arrays: nodes, elements and their order, points, cells, pressure numbering,
    geometry, colours, element ids, parents, boundary faces and tags, unknowns, owners and
    shared lists (the halo); hex8 and curved hex27 files (twice refined: its last refinement),
    elements of twisted orientations, a refined box."""
    from gpucfd.backend import get_backend

    cpu = get_backend("cpu")
    for r in range(parts):
        lazy, whole = REFINED_PARTS[name](), REFINED_PARTS[name]()
        whole.cells  # the arrays made: distribute cuts them
        alone, cut = distribute(lazy, _Rank(r, parts), cpu), distribute(whole, _Rank(r, parts), cpu)
        assert not lazy.built and alone.mesh.whole is lazy and cut.mesh.whole is whole
        assert_same_part(alone, cut, ("parent", "child_position"))
        assert alone.mesh.coarser is lazy.coarser
        assert len(cut.dist.shared) >= 1 and alone.mesh.n_elements < lazy.n_elements


def test_a_rank_holds_a_third_of_the_host_memory_of_one_process_for_a_refined_mesh():
    """The distorted cube refined twice (13,824 elements): made whole by one process, its
    arrays' traced peak is 32.0 MB (11.0 MB kept); built by one of 4 ranks from its parents,
    10.1 MB (4.5 MB kept): at most 0.4 times, the meshes it refines held by both."""
    import tracemalloc

    from gpucfd.backend import get_backend

    cpu, coarse = get_backend("cpu"), refine(sample_mesh("distorted"), 1)
    coarse.cells

    def peak(rank, parts):
        tracemalloc.start()
        part = distribute(refine(coarse, 1), _Rank(rank, parts), cpu)
        part.mesh.points, part.mesh.cells, part.mesh.geometry  # one process: the whole mesh's arrays
        held, most = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return held, most

    alone = peak(0, 1)
    for r in range(4):
        part = peak(r, 4)
        assert part[1] <= 0.4 * alone[1] and part[0] <= 0.45 * alone[0], (part, alone)


def test_a_box_is_cut_from_its_slabs_until_its_arrays_are_made_then_from_them():
    """distribute builds a rank's part of a Box from its slab (the whole box's arrays not made,
    the part's ``whole`` None); once the arrays are made (and here moved) it cuts them."""
    from gpucfd.backend import get_backend

    cpu, box = get_backend("cpu"), box_mesh(4, 3, 3)
    alone = distribute(box, _Rank(1, 2), cpu)
    assert not box.built and alone.mesh.whole is None
    box.points[:, 1] += 1.0  # the arrays made, and changed
    cut = distribute(box, _Rank(1, 2), cpu)
    assert cut.mesh.whole is box and np.array_equal(cut.mesh.points[:, 1], alone.mesh.points[:, 1] + 1.0)
    assert np.array_equal(cut.mesh.cells, alone.mesh.cells) and np.array_equal(cut.dist.gdofs, alone.dist.gdofs)


def test_more_ranks_than_layers_or_elements_is_an_error():
    with pytest.raises(InputError, match="3 ranks but the mesh has only 2 element layers along x; start at most 2"):
        partition_elements(box_mesh(2, 1, 1), 3)
    with pytest.raises(InputError, match="217 ranks but the mesh has only 216 elements"):
        partition_elements(sample_mesh("distorted"), 217)


def test_interface_sums_add_in_rank_order(backend):
    """Slot 0 holds partial sums from this rank (first) and two peers: 1e16 - 1e16 + 3
    only gives 3 in that order; slot 1 has a peer before this rank."""
    from fem3d.kernels import interface

    v = backend.asarray([1e16, 1.0, 5.0])
    recv = backend.asarray([-1e16, 3.0, 1.0])
    plan = [backend.asarray(a, dtype=np.int32) for a in ([0, 1], [0, 3, 5], [-1, 0, 1, 2, -1])]
    interface.for_array(v)(v, plan[0], recv, *plan[1:])
    assert backend.to_numpy(v).tolist() == [3.0, 2.0, 5.0]
    rng = np.random.default_rng(3)  # the kernel and the NumPy reference agree bit for bit
    n, m = 1000, 300
    iface = np.sort(rng.choice(n, m, replace=False)).astype(np.int32)
    counts = rng.integers(1, 5, m)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    src = rng.integers(-1, 500, ptr[-1]).astype(np.int32)
    src[ptr[:-1]] = -1
    v0, recv = rng.standard_normal(n), rng.standard_normal(500)
    ref = v0.copy()
    interface.combine_numpy(ref, iface, recv, ptr, src)
    mine = backend.asarray(v0)
    interface.for_array(mine)(mine, *(backend.asarray(a) for a in (iface, recv, ptr, src)))
    assert np.array_equal(backend.to_numpy(mine), ref)
    untouched = np.setdiff1d(np.arange(n), iface)
    assert np.array_equal(ref[untouched], v0[untouched])


# ------------------------------------------------- command lines under mpiexec (serial)

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
needs_mpiexec = pytest.mark.skipif(
    MPIEXEC is None or launched_ranks() > 1, reason="needs mpiexec (and not already under it)"
)


def mpiexec(*args, timeout=120, cwd=None):
    return subprocess.run([MPIEXEC, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@needs_mpiexec
@pytest.mark.parametrize(
    "ranks, args, message",
    [
        (2, ["--re", "0"], "fem3d.cavity: error: --re must be > 0 and <= 100000 (got 0.0)"),
        (
            3,
            ["--n", "2"],
            "fem3d.cavity: error: 3 ranks but the mesh has only 2 element layers along x; start at most 2 ranks",
        ),
        (2, ["--comm", "carrier-pigeon"], "fem3d.cavity: error: --comm must be one of auto, serial, mpi, nccl"),
        (2, ["--comm", "serial"], "fem3d.cavity: error: --comm serial but started as 2 MPI ranks"),
    ],
)
def test_bad_input_under_mpi_one_line_exit_2(tmp_path, ranks, args, message):
    p = mpiexec("-n", str(ranks), sys.executable, "-m", "fem3d.cavity", "--out", str(tmp_path), "--quiet", *args)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), p.stderr


@needs_mpiexec
def test_ranks_that_disagree_on_arguments_stop_with_exit_2(tmp_path):
    cmd = [sys.executable, "-m", "fem3d.cavity", "--out", str(tmp_path), "--quiet", "--n", "2"]
    p = mpiexec("-n", "1", *cmd, "--re", "100", ":", "-n", "1", *cmd, "--re", "200")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines() == [
        f"fem3d.cavity: error: ranks disagree on the arguments: rank 1 got '{' '.join(cmd[3:])} --re 200', "
        f"rank 0 got '{' '.join(cmd[3:])} --re 100'; give every rank the same command line"
    ]


@needs_mpiexec
def test_a_failing_rank_aborts_every_rank_with_a_message():
    """Rank 1 fails while rank 0 waits in a collective: the job must end, not hang."""
    code = (
        "from fem3d.parallel.comm import setup\n"
        "from gpucfd.errors import run_cli\n"
        "def main(argv):\n"
        "    backend, comm = setup('cpu')\n"
        "    if comm.rank == 1:\n"
        "        raise MemoryError('out of device memory')\n"
        "    comm.allgather(None)\n"
        "raise SystemExit(run_cli(main, prog='demo'))\n"
    )
    p = mpiexec("-n", "2", sys.executable, "-c", code, timeout=60)
    assert p.returncode != 0
    assert "demo: rank 1 of 2 failed: MemoryError: out of device memory; aborting all ranks" in p.stderr


# ------------------------------------------------------------ under mpiexec -n 2 / -n 3


@pytest.fixture(
    scope="module",
    params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu), pytest.param("gpu mpi", marks=pytest.mark.gpu)],
)
def ranks(request):
    """(backend, communicator) of this rank, from fem3d.parallel.comm.setup as the entry points do:
    NumPy with MPI, GPUs with NCCL (where CuPy has it), GPUs with host-staged MPI."""
    from gpucfd.backend import cupy_module
    from fem3d.parallel.comm import setup

    device, _, comm = request.param.partition(" ")
    if device == "gpu" and cupy_module() is None:
        pytest.skip("no CUDA GPU")
    if launched_ranks() < 2:
        pytest.skip("run under mpiexec")
    return setup(device, comm or "auto", allow_shared_gpu=True)


def relative(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["box", "distorted"])
def test_operator_products_and_diagonal_match_single_process(ranks, name):
    backend, comm = ranks
    mesh = sample_mesh(name) if name != "box" else box_mesh(3, 2, 2)
    serial, _, _ = assembled(mesh, backend, seed=4)  # global element matrices, Dirichlet rows
    part = distribute(mesh, comm, backend)
    local = ElementOperator(backend, part.mesh.dofs(), part.mesh.colour_offsets, part.mesh.n_dofs, part.dist)
    local.mats[...] = serial.op.mats[backend.asarray(part.elements)]
    g = backend.asarray(part.dist.gdofs)
    x = backend.asarray(np.random.default_rng(9).standard_normal(mesh.n_dofs))
    xp = backend.xp
    for mine, ref in (
        (local.matvec(x[g], xp.empty(local.n)), serial.op.matvec(x, xp.empty(mesh.n_dofs))),
        (local.rmatvec(x[g], xp.empty(local.n)), serial.op.rmatvec(x, xp.empty(mesh.n_dofs))),
        (local.normal_diagonal(), serial.op.normal_diagonal()),
    ):
        assert relative(backend.to_numpy(mine), backend.to_numpy(ref[g])) < 1e-13
    assert abs(part.dist.dot(x[g], x[g]) - float(x @ x)) < 1e-12 * float(x @ x)
    everyone = comm.allgather(part.dist.gdofs[part.dist.owned])
    assert np.array_equal(np.sort(np.concatenate(everyone)), np.arange(mesh.n_dofs))  # each unknown owned once
    whole = backend.to_numpy(x)
    for repeat in range(2):  # the second gather reuses the global unknowns gathered by the first
        on_root, on_all = (
            part.dist.gather(whole[part.dist.gdofs]),
            part.dist.gather(whole[part.dist.gdofs], everyone=True),
        )
        assert np.array_equal(on_all, whole) and (np.array_equal(on_root, whole) if comm.rank == 0 else on_root is None)


@pytest.mark.mpi
def test_overlapped_products_equal_the_blocking_ones(ranks, monkeypatch):
    """The products that start the interface sum after the interface elements and complete it
    after the interior ones (--overlap: ElementOperator.passes) against the blocking order
    (every element, then the sum): equal to round-off; the copies of a shared entry agree to
    the bit."""
    from fem3d.kernels import ebe

    backend, comm = ranks
    xp = backend.xp
    mesh = box_mesh(3, 3, 12)  # slabs of 3 or more layers on up to 4 ranks: interior elements on every middle rank
    part = distribute(mesh, comm, backend)
    assert (
        ElementOperator(backend, part.mesh.dofs(), part.mesh.colour_offsets, part.mesh.n_dofs, part.dist).passes is None
    )
    monkeypatch.setattr(comm, "overlap", True)
    op = ElementOperator(backend, part.mesh.dofs(), part.mesh.colour_offsets, part.mesh.n_dofs, part.dist)
    rng = np.random.default_rng(11)
    op.mats[...] = backend.asarray(rng.standard_normal((mesh.n_elements,) + op.mats.shape[1:])[part.elements])
    x = backend.asarray(rng.standard_normal(mesh.n_dofs)[part.dist.gdofs])
    interface, interior = op.passes
    counts = comm.allgather((sum(b - a for a, b in interface), sum(b - a for a, b in interior)))
    assert all(i > 0 for i, _ in counts) and sum(j for _, j in counts) > 0 and sum(map(sum, counts)) == mesh.n_elements
    for transpose in (False, True):
        got = (op.rmatvec if transpose else op.matvec)(x, xp.empty(op.n))
        ref = xp.empty(op.n)
        ebe.for_backend(backend)(op.mats, op.dofs, x, ref, op.colours, transpose)
        part.dist.sum_interface(ref)
        assert relative(backend.to_numpy(got), backend.to_numpy(ref)) < 1e-15
        mine = {
            int(g): v for g, v in zip(part.dist.gdofs[part.dist.interface], backend.to_numpy(got)[part.dist.interface])
        }
        for theirs in comm.allgather(mine):
            assert all(mine[g] == v for g, v in theirs.items() if g in mine)


def single_process_solve(problem, backend):
    return NonlinearSolver(NavierStokesSystem(problem, backend), make_linear_solver(LINEAR), TIGHT).solve()


def distributed_solve(problem, backend, comm):
    part = distribute(problem.mesh, comm, backend)
    result = NonlinearSolver(partitioned_system(problem, part, backend), make_linear_solver(LINEAR), TIGHT).solve()
    return result, part.dist.gather(result.x)


@pytest.mark.mpi
def test_cavity_solution_matches_single_process(ranks):
    backend, comm = ranks
    problem = lid_driven_problem(box_mesh(4, 3, 3, grading=1.0), 50.0, "y=1")
    result, x = distributed_solve(problem, backend, comm)
    assert result.converged
    if comm.rank == 0:
        ref = single_process_solve(problem, backend)
        assert ref.converged and len(ref.steps) == len(result.steps)
        assert relative(x, ref.x) < 1e-10


@pytest.mark.mpi
def test_paper_flow_on_a_general_mesh_matches_single_process(ranks):
    backend, comm = ranks
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(sample_mesh("distorted"), case.re, lambda x: case.velocity(np, x))
    result, x = distributed_solve(problem, backend, comm)
    assert result.converged
    if comm.rank == 0:
        ref = single_process_solve(problem, backend)
        assert relative(x, ref.x) < 1e-10


@pytest.mark.mpi
@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut"])
def test_sequenced_cavity_matches_single_process(ranks, tmp_path, monkeypatch, cut):
    """Mesh sequencing under MPI (fem3d.cavity with --sequence 1): the coarse mesh solved whole on
    every rank (sequencing.redundant), or cut among the ranks (a REDUNDANT_MAX of 0, and the
    products overlapping their interface sums: --overlap) and gathered, each rank
    interpolating its part of the fine mesh, the fine solve cut among the ranks from it with
    Newton steps; the same solution as one process doing the same with the library. No rank
    made the whole fine box's arrays: each built its part from its slab."""
    from dataclasses import replace

    from fem3d import cavity
    from fem3d.discretisation.mesh import Box
    from fem3d.solvers import sequencing
    from fem3d.solvers.sequencing import coarsening, interpolate

    backend, comm = ranks
    n = 8 if cut else 6
    if cut:
        monkeypatch.setattr(sequencing, "REDUNDANT_MAX", 0)
    built, make = [], Box.__getattr__

    def recorded(box, name):
        built.append(box.grid)
        return make(box, name)

    monkeypatch.setattr(Box, "__getattr__", recorded)
    out = comm.bcast(str(tmp_path))
    assert (
        cavity.main(
            [
                "--n",
                str(n),
                "--re",
                "100",
                "--sequence",
                "1",
                "--tol",
                "1e-9",
                "--quiet",
                "--no-plots",
                "--no-vtu",
                "--device",
                "gpu" if backend.is_gpu else "cpu",
                "--allow-shared-gpu",
                "--comm",
                comm.name,
                "--out",
                out,
            ]
            + (["--overlap"] if cut else [])
        )
        == 0
    )
    assert (n, n, n) not in built, built
    if comm.rank != 0:
        return
    summary, x = json.load(open(os.path.join(out, "summary.json"))), np.load(os.path.join(out, "solution.npy"))
    mesh = box_mesh(n)
    c = coarsening(mesh)
    options, linear = NonlinearOptions(tol=1e-9), LinearOptions(solver="mg")
    coarse = NonlinearSolver(
        NavierStokesSystem(lid_driven_problem(c.coarse, 100.0, "y=1"), backend),
        make_linear_solver(linear.for_mesh(c.coarse)),
        options,
    ).solve()
    guess = interpolate(backend.xp, backend.asarray(coarse.x), mesh, c)
    ref = NonlinearSolver(
        NavierStokesSystem(lid_driven_problem(mesh, 100.0, "y=1"), backend),
        make_linear_solver(linear.for_mesh(mesh)),
        replace(options, newton=np.inf),
    ).solve(guess)
    assert [s["elements"] for s in summary["sequence"]] == [(n // 2) ** 3] and summary["sequence"][0]["converged"]
    assert [r["overlap"] for r in summary["per_rank"]] == [cut] * comm.size
    assert summary["nonlinear_steps"] == len(ref.steps) and relative(x, ref.x) < 1e-8


@pytest.mark.mpi
def test_refined_file_mesh_is_solved_in_parts_never_made_whole(ranks, tmp_path, monkeypatch):
    """fem3d.cavity on the distorted cube refined once under MPI: every rank builds its part
    of the refinement from its parents (fem3d.parallel.partition.refined_part), multigrid
    descends to the file's mesh, the profiles are located in the parents; no rank, rank 0's
    outputs included, makes the whole refined mesh's arrays. The same Newton steps and
    solution as one process with the library."""
    from fem3d import cavity
    from fem3d.discretisation.refine import Refined

    backend, comm = ranks
    built, make = [], Refined._arrays

    def recorded(mesh):
        built.append(mesh.n_elements)
        return make(mesh)

    monkeypatch.setattr(Refined, "_arrays", recorded)
    out = comm.bcast(str(tmp_path))
    mesh_file = os.path.join(os.path.dirname(__file__), "..", "meshes", "distorted_cube_hex8.msh")
    args = ["--mesh", mesh_file, "--refine", "1", "--re", "100", "--sequence", "none", "--tol", "1e-9", "--quiet"]
    device = ["--device", "gpu" if backend.is_gpu else "cpu", "--allow-shared-gpu", "--comm", comm.name]
    assert cavity.main(args + device + ["--out", out]) == 0
    assert built == [], built
    if comm.rank != 0:
        return
    summary, x = json.load(open(os.path.join(out, "summary.json"))), np.load(os.path.join(out, "solution.npy"))
    assert os.path.exists(os.path.join(out, "profiles.png")) and os.path.exists(os.path.join(out, "cavity.pvtu"))
    mesh = refine(sample_mesh("distorted"), 1)
    ref = NonlinearSolver(
        NavierStokesSystem(lid_driven_problem(mesh, 100.0, "y=1"), backend),
        make_linear_solver(LinearOptions(solver="mg").for_mesh(mesh)),
        NonlinearOptions(tol=1e-9),
    ).solve()
    assert summary["nonlinear_steps"] == len(ref.steps) and relative(x, ref.x) < 1e-8


@pytest.mark.mpi
def test_cavity_command_writes_pieces_joined_by_pvtu(ranks, tmp_path):
    from fem3d import cavity

    backend, comm = ranks
    out = comm.bcast(str(tmp_path))  # one folder for all ranks
    device = "gpu" if backend.is_gpu else "cpu"
    assert (
        cavity.main(
            [
                "--n",
                "3",
                "--out",
                out,
                "--quiet",
                "--no-plots",
                "--device",
                device,
                "--comm",
                comm.name,
                "--allow-shared-gpu",
            ]
        )
        == 0
    )
    if comm.rank != 0:
        return
    assert sorted(f for f in os.listdir(out) if f.endswith(".vtu")) == [f"cavity_{r}.vtu" for r in range(comm.size)]
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert (
        summary["ranks"] == comm.size
        and summary["converged"]
        and summary["files"] == ["solution.npy", "cavity.pvtu", "profiles.csv", "summary.json"]
    )
    assert summary["communicator"] == comm.name
    per_rank = summary["per_rank"]
    assert [r["rank"] for r in per_rank] == list(range(comm.size))
    assert sum(r["elements"] for r in per_rank) == 27
    assert all(r["communication_s"] > 0 and r["compute_s"] > 0 and r["interface_unknowns"] > 0 for r in per_rank)
    assert all(
        r["traffic"]["exchanges"] > 0 and r["traffic"]["message_bytes"] >= 8 * r["interface_unknowns"] for r in per_rank
    )
    for r in per_rank:  # 3^3 is its own coarsest level: one level, every fine interface sum counted on it
        levels = r["multigrid"]["levels"]
        assert r["multigrid"]["v_cycles"] == summary["linear_iterations"] and len(levels) == 1
        assert levels[0]["elements"] == r["elements"] and levels[0]["partitioned"]
        assert 0 < levels[0]["interface_sums"] <= r["traffic"]["exchanges"] and 0 < levels[0]["values_sent"]
    assert all(
        list(r["times_s"]) == ["data_preparation", "element_matrices", "linear_setup", "solve"] for r in per_rank
    )
    assert [r["neighbours"] for r in per_rank] == [
        [q for q in (k - 1, k + 1) if 0 <= q < comm.size] for k in range(comm.size)
    ]  # slabs
    elements = [r["elements"] for r in per_rank]  # 3 layers of 9: 18 + 9 on two ranks, 9 each on three
    assert summary["partition"] == {
        "elements": [min(elements), max(elements)],
        "imbalance": pytest.approx(max(elements) * comm.size / 27),
        "interface_unknowns": max(r["interface_unknowns"] for r in per_rank),
        "neighbours": min(2, comm.size - 1),
    }
    assert (
        summary["t_run_s"] == pytest.approx(sum(per_rank[0]["times_s"].values()))
        and summary["t_run_s"] <= summary["wall_s"]
    )
    pyvista = pytest.importorskip("pyvista")
    grid = pyvista.read(os.path.join(out, "cavity.pvtu"))
    assert grid.n_cells == 27 and set(grid.point_data.keys()) >= {"velocity", "pressure", "speed", "vorticity"}
    lid = np.abs(np.asarray(grid.points)[:, 1] - 1.0) < 1e-12
    inner = lid & (np.asarray(grid.points)[:, 0] > 1e-12) & (np.asarray(grid.points)[:, 0] < 1 - 1e-12)
    inner &= (np.asarray(grid.points)[:, 2] > 1e-12) & (np.asarray(grid.points)[:, 2] < 1 - 1e-12)
    assert np.allclose(np.asarray(grid.point_data["velocity"])[inner], [1.0, 0.0, 0.0])


@pytest.mark.mpi
def test_verification_errors_match_single_process(ranks):
    from fem3d.parallel.comm import SerialComm
    from fem3d.problems.exact import TrigFlow
    from fem3d.verify import run_case

    backend, comm = ranks
    case = TrigFlow(10.0)
    row = run_case(case, 3, backend, comm, TIGHT, LINEAR)
    assert row["converged"]
    if comm.rank == 0:
        ref = run_case(case, 3, backend, SerialComm(), TIGHT, LINEAR)
        for f in "uvwp":
            assert abs(row["errors"][f] - ref["errors"][f]) <= 1e-9 * ref["errors"][f]


MG_MESHES = {
    "box": lambda: box_mesh(8, 4, 4, grading=1.0),
    "odd box": lambda: box_mesh(9, 6, 6, grading=1.0),
    "deep box": lambda: box_mesh(12, 4, 4, lengths=(3.0, 1.0, 1.0)),
    "refined annulus": lambda: refine(sample_mesh("annulus")),
    "twisted file mesh": lambda: twisted_mesh(6),
    "layered file mesh": lambda: twisted_mesh(grid=(6, 6, 6), jitter=0.0, grading=(0.0, 0.0, 3.25), seed=2),
}


def one_wall_layers():
    """A 6 x 6 x 12 hex8 box, 2 long in z, whose z layers thin toward z = 0 alone (z ->
    2 (z / 2)^3: the first 36 times wider than thick, the layers above wider than thick at
    most 5.2 times, then longer than wide)."""
    box = box_mesh(6, 6, 12, lengths=(1.0, 1.0, 2.0))
    verts = box.points[box.pressure_nodes].copy()
    verts[:, 2] = 2.0 * (verts[:, 2] / 2.0) ** 3
    return mesh_from_hex8(verts, box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)])


@pytest.mark.mpi
def test_line_vanka_on_some_ranks_only_matches_single_process(ranks):
    """Lines on the ranks that hold the thin layer at z = 0 and element Vanka on the others
    (each rank's smoother its own, one interface sum per smoothing on every rank): the
    single process's solution and FGMRES iterations."""
    backend, comm = ranks
    mesh = one_wall_layers()
    problem = lid_driven_problem(mesh, 100.0, "y=1")
    linear = LinearOptions(solver="mg", smoother="line").for_mesh(mesh)
    part = distribute(mesh, comm, backend, linear.alignment(mesh, comm.size))
    solver = make_linear_solver(linear)
    result = NonlinearSolver(partitioned_system(problem, part, backend), solver, TIGHT).solve()
    names = set(comm.allgather(solver.mg.levels[0].smoother.name))
    x = part.dist.gather(result.x)
    assert result.converged and names == {"line Vanka", "element Vanka"}, names
    if comm.rank == 0:
        from gpucfd.backend import get_backend

        ref_solver = make_linear_solver(linear)
        ref = NonlinearSolver(NavierStokesSystem(problem, get_backend("cpu")), ref_solver, TIGHT).solve()
        its, ref_its = result.linear_iterations, ref.linear_iterations
        assert abs(its - ref_its) <= 0.1 * ref_its, (its, ref_its)
        assert np.abs(backend.to_numpy(x) - ref.x).max() <= 1e-7 * np.abs(ref.x).max()


@pytest.mark.mpi
@pytest.mark.parametrize(
    "name, assembly", [(name, "element") for name in MG_MESHES] + [("odd box", "partial"), ("deep box", "partial")]
)
def test_mg_solver_matches_single_process(ranks, name, assembly, monkeypatch):
    """The multigrid solver on ranks gives the single-process solution with its FGMRES
    iterations: on boxes (the single process's hierarchy: 8x4x4 solved directly; 9x6x6 over
    a 5x3x3 level replicated on every rank; 12x4x4 cubes, coarsened down to 1,000 unknowns, over
    6x2x2 partitioned and 3x2x2 replicated) and on the hex27 annulus refined once (its
    elements bisected, the children on their parent's rank), end plates sliding, and on a
    file mesh of 216 turned elements cut by METIS over its sheet coarsening (27 elements)
    replicated on every rank, and the same elements in layers graded toward two walls (cells
    14.5 times wider than thick) with --smoother line, each line within its rank; also with
    the products by sum factorisation (against stored matrices on one process; the deep box's
    smoother blocks summed in slabs of 20 target elements, the peers' entries first). The
    coarsest level's SuperLU factors (cut among the ranks or held whole by each) are made by
    rank 0 alone."""
    backend, comm = ranks
    if name == "deep box":
        monkeypatch.setattr("fem3d.solvers.multigrid.COARSE_MAX", 1000)
        monkeypatch.setattr("fem3d.solvers.vanka.GROUP", 20)
    mesh = MG_MESHES[name]()
    problem = lid_driven_problem(mesh, 100.0, "ends" if name == "refined annulus" else "y=1")
    smoother = "line" if name == "layered file mesh" else "element"
    linear = LinearOptions(solver="mg", assembly=assembly, smoother=smoother).for_mesh(mesh)
    part = distribute(mesh, comm, backend, linear.alignment(mesh, comm.size))
    solver = make_linear_solver(linear)
    result = NonlinearSolver(partitioned_system(problem, part, backend, assembly=assembly), solver, TIGHT).solve()
    x = part.dist.gather(result.x)
    assert result.converged and all(s.linear_reason == "converged" for s in result.steps)
    assert solver.mg.levels[0].smoother.name == f"{smoother} Vanka"
    direct = solver.mg.direct  # SuperLU's factors (the CPU's) on rank 0 alone, each solution broadcast
    assert direct.root == (direct.method == "superlu")
    assert direct.method != "superlu" or (direct.lu is not None) == (comm.rank == 0)
    if name == "deep box":  # on 2 or 3 ranks partitioned, partitioned, replicated (the children's sums completed over
        # the ranks); on 4 the 6x2x2 level's 6 layers cannot hold whole units of 4 slabs: it is replicated too
        serial, gathered = (
            ([False, False, True], [False, True, False])
            if comm.size <= 3
            else ([False, True, True], [True, False, False])
        )
        assert [level.op.dist.is_serial for level in solver.mg.levels] == serial
        assert [level.gathered for level in solver.mg.levels] == gathered
        traffic = solver.traffic()  # one V-cycle per FGMRES iteration; no interface sum on a replicated level
        assert traffic["v_cycles"] == sum(s.linear_iterations for s in result.steps)
        assert [lv["partitioned"] for lv in traffic["levels"]] == [not x for x in serial]
        assert all(
            (lv["interface_sums"] > 0) == lv["partitioned"] and (lv["values_sent"] > 0) == lv["partitioned"]
            for lv in traffic["levels"]
        )
        if traffic["levels"][1]["partitioned"]:  # each smoothing step's product and smoother
            assert traffic["levels"][1]["interface_sums"] >= 2 * solver.mg.steps * traffic["v_cycles"]
    if comm.rank == 0:
        ref = NonlinearSolver(
            NavierStokesSystem(problem, backend),
            make_linear_solver(LinearOptions(solver="mg", smoother=smoother)),
            TIGHT,
        ).solve()
        assert ref.converged and len(ref.steps) == len(result.steps)
        its, ref_its = (sum(s.linear_iterations for s in r.steps) for r in (result, ref))
        assert abs(its - ref_its) <= 0.1 * ref_its, (its, ref_its)
        assert relative(x, ref.x) < 1e-8


@pytest.mark.mpi
def test_channel_forces_and_point_values_match_single_process(ranks):
    """Inflow, outflow, walls and slip planes: the developing flow of a uniform inflow, its
    wall force by the residual and its point values, the same on every rank count."""
    backend, comm = ranks
    mesh = box_mesh(6, 2, 2, lengths=(3.0, 1.0, 0.5))
    problem = FlowProblem.with_conditions(
        mesh, 30.0, {"x0": Velocity(1, 0, 0), "x1": Outflow(), "y0": Wall(), "y1": Wall(), "z0": Slip(), "z1": Slip()}
    )
    part = distribute(mesh, comm, backend)
    system = partitioned_system(problem, part, backend)
    result = NonlinearSolver(system, make_linear_solver(LINEAR), TIGHT).solve()
    assert result.converged
    force = boundary_force(system, result.x, ["y0"])
    points = [[0.4, 0.3, 0.2], [2.6, 0.5, 0.25], [1.5, 0.5, 0.0]]
    velocity, pressure = point_values(part.mesh, result.x, points, comm)
    x = part.dist.gather(result.x)
    if comm.rank == 0:
        serial = NavierStokesSystem(problem, backend)
        ref = NonlinearSolver(serial, make_linear_solver(LINEAR), TIGHT).solve()
        assert relative(x, ref.x) < 1e-8
        ref_force = boundary_force(serial, ref.x, ["y0"])
        ref_velocity, ref_pressure = point_values(mesh, ref.x, points)
        assert force[0] > 0 and relative(force, ref_force) < 1e-8
        assert relative(velocity, ref_velocity) < 1e-8 and relative(pressure, ref_pressure) < 1e-8


def test_partition_figures_and_their_line():
    from fem3d.problems.distributed import partition_balance, partition_line

    per_rank = [
        {"elements": 18, "interface_unknowns": 120, "neighbours": [1]},
        {"elements": 6, "interface_unknowns": 200, "neighbours": [0, 2]},
        {"elements": 12, "interface_unknowns": 80, "neighbours": [1]},
    ]
    balance = partition_balance(per_rank)
    assert balance == {"elements": [6, 18], "imbalance": 1.5, "interface_unknowns": 200, "neighbours": 2}
    assert partition_line(balance) == (
        "partition: 6-18 elements per rank (imbalance 1.500); a rank shares at most 200 "
        "unknowns, with at most 2 other ranks"
    )
    assert partition_line({**balance, "neighbours": 1}).endswith("with at most 1 other rank")
    assert partition_balance(per_rank[:1]) is None and partition_balance(None) is None


@pytest.mark.mpi
def test_traffic_counts_reductions_exchanges_messages_and_bytes(ranks):
    """One interface sum is one exchange of a message per neighbour, 8 bytes per shared
    entry; one allreduce of 3 entries is one reduction of 24 bytes. The links that
    distribute opened (comm.connect) carry the first sums: each entry of a sum of ones
    counts the ranks holding it."""
    backend, comm = ranks
    part = distribute(box_mesh(6), comm, backend)
    comm.connect(part.dist.shared)  # the same peers again: nothing to open
    before = dict(comm.traffic)
    ones = part.dist.sum_interface(backend.xp.ones(part.dist.n))
    total = part.dist.allreduce(backend.xp.asarray([1.0, comm.rank, 2.0]))
    holders = np.ones(part.dist.n)
    for idx in part.dist.shared.values():
        holders[idx] += 1
    assert np.array_equal(backend.to_numpy(ones), holders)
    assert backend.to_numpy(total).tolist() == [comm.size, comm.size * (comm.size - 1) / 2, 2.0 * comm.size]
    got = {k: comm.traffic[k] - before[k] for k in before}
    shared = sum(len(i) for i in part.dist.shared.values())
    assert got == {
        "reductions": 1,
        "reduction_bytes": 24,
        "exchanges": 1,
        "messages": len(part.dist.shared),
        "message_bytes": 8 * shared,
    }
    assert len(part.dist.shared) == (1 if comm.rank in (0, comm.size - 1) else 2) and shared > 0
