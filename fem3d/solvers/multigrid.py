"""Monolithic geometric multigrid for the linearised Q2-Q1 equations on nested hexahedral meshes.

Levels are a chain of meshes, each refining the next coarser one: each element is a child
of a parent element (HexMesh.parent, child_position), placed by the parent's map, so each
level's Q2 velocity and Q1 pressure spaces lie in the finer level's. The chain is a mesh's
refinement history (fem3d.discretisation.refine: HexMesh.coarser, down to the mesh read from
a file; 8 children per parent), continued on a structured box by coarser boxes
(coarse_grids, split): along each side pairs of element layers share a parent and, where
the side has an odd number of layers, one coarse layer near the middle has one child layer, so a
parent has 1, 2, 4 or 8 children, each the lower half, the upper half or the whole of the
parent along each axis (27 position codes); on any other mesh by pairing its sheets
(fem3d.discretisation.coarsen: the same kinds of parents, their children turned in them as a
file lists them, semi-coarsened where the cells are stretched; a refined mesh most of whose
cells are stretched is coarsened so from its finest level: chain). The prolongation P from a
level to the next finer one interpolates each parent's velocity and pressure at the nodes of
its children in reference coordinates: one 89 x 89 matrix per kind of child (its position
code and turn: Transfers), the same for every parent, applied to all children of one kind in
one product. Coarse operators are Galerkin,
A_coarse = P^T A P, and stay element-local because the spaces are nested: a parent's matrix
is the sum over its children of P_c^T A_child P_c. Prescribed (Dirichlet) unknowns are left
out of P on both levels; on the coarse level they keep the paper's rows (diagonal 1/S_k),
so corrections never move them.

The cycle works on matrices stored in float32 (STORAGE) with float64 vectors: the finest
level holds the system's element matrices where they are float32 (NavierStokesSystem's
float32 storage), else a float32 copy (refreshed at every linearisation, also when the rest
of the hierarchy is kept); the coarse Galerkin matrices are float32, the smoothers' inverses
float16 scaled per row on a GPU and float32 on the CPU (INVERSES). A preconditioner needs no
more, and its products read a half or a quarter of the bytes; the Krylov method around it
keeps the float64 operator. A sum-factorised system (partial assembly) stores no element
matrix: its finest level, where coarser ones exist, applies the system's operator, and each
set-up computes the element matrices a chunk at a time for the Galerkin product and the
smoother's blocks (Level.galerkin), keeping none.

One application is a V(1,1) cycle: ``smoothing_steps`` GMRES steps preconditioned by the
element Vanka smoother (fem3d.solvers.vanka), or line Vanka on the levels with long, thin
cells (fem3d.solvers.line_vanka, and then the hierarchy of a Newton step from its Jacobian
with frozen test functions: Multigrid) before and after the coarse correction; the coarsest level is
solved exactly: its assembled matrix, the same on every rank, on a GPU by its dense inverse
up to DENSE_MAX unknowns and by its dense LU factors above (where the device has room), else
by SciPy's SuperLU on the host (CoarseSolve), where its factors fit (direct_fits: a memory
estimate, not a count of unknowns). The pressure level of an enclosed flow (no outflow
boundary) is fixed on the coarsest level at one pressure unknown. A cycle reads nothing
back, so on one GPU with the dense coarse solve the cycle from the first level of at most
GRAPH_ELEMENTS elements down is replayed from a CUDA graph (gpucfd.graphs.Replayed): on
those levels the host's time to launch a smoothing step's kernels exceeds the device's time
to run them. The set-up keeps every array the cycle reads at its address, so one graph
serves the run.

Under MPI the hierarchy is the one of a single process. The levels of a mesh's refinement
history and the leading coarse boxes that halve the box's slab axis
(fem3d.solvers.multigrid.distributed_grids) are partitioned by the partition of the
coarsest of them (fem3d.parallel.partition.partition_elements: children follow their
parents; a box is cut in slabs of whole coarse layers), so parents and their children
live on one rank and each such level completes its interface sums like the fine operator.
The coarser boxes are replicated: every rank holds the whole level and does its work
alike, and the sums of the children of the first of them (restriction, Galerkin
matrices) are completed over all ranks (Level.gathered).
"""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..discretisation.assembly import apply_dirichlet_rows, dirichlet_rows
from ..discretisation.element import Q1, Q2
from ..kernels import vectors
from ..kernels.scatter import ScatterPlan
from ..kernels.ebe import NL, colour_ranges
from .krylov import gmres_steps
from ..discretisation.coarsen import STRONG, child_kinds
from ..discretisation.mesh import box_mesh, box_order, grid_index
from gpucfd.backend import host_free_bytes
from gpucfd.graphs import Replayed
from .operators import ElementOperator
from ..parallel.comm import SerialComm
from ..parallel.partition import box_part, distribute
from .line_vanka import LineVanka, smoother_for

# The measurements behind these values are in docs/solvers.md ("The multigrid constants").
STORAGE = np.float32  # the levels' matrices and smoothers: as many iterations as float64, each reading half the bytes
MIN_COARSE = 2  # sides of at most this many elements are not coarsened
LAYERS_PER_RANK = 2  # under MPI, a partitioned coarse box keeps at least this many layers per rank along the slab axis;
IMBALANCE_MAX = 1.1  # of those, the partitioned ones are the most leading ones whose coarsest layers cut in slabs
# give a rank at most this many times the mean (112^3 on 4 ranks: 28 slab units of 4 layers, not 14 of 8 with 1.14
# times the mean on two ranks); the coarser ones are replicated on every rank
COARSE_MAX = 5_000  # a box or mesh of at most this many unknowns is not coarsened: the coarsest level of a
# 40^3 box is its 5^3 (4,209 unknowns), of any N^3 box from 6^3 to 100^3 3^3 to 5^3 (1,093-4,209), solved directly
STRETCHED = 0.5  # a refined mesh with more than this share of elements long along an axis is semi-coarsened from its
# finest level (docs/solvers.md, stretched cells)
FILL = (604.0, 6_934, 0.66)  # SuperLU's factors (PERMC_SPEC, PIVOT_THRESHOLD): entries of L + U per unknown at a
# reference size, and their growth exponent; 12 bytes each (docs/solvers.md, coarsest level)
HOST_SHARE = 0.5  # the most of the host's free memory the coarsest level's factors may take
PERMC_SPEC = "MMD_AT_PLUS_A"  # SuperLU's column ordering: the least fill and set-up time of SuperLU's orderings
PIVOT_THRESHOLD = 0.1  # SuperLU pivots when a diagonal entry is below this fraction of its column's largest: the
# default 1.0 pivots the saddle-point rows far from the fill-reducing order, multiplying the fill and the time
DENSE_MAX = 5_000  # most unknowns of a coarsest level inverted as a dense matrix on a GPU (a box's coarsest has at most
# COARSE_MAX): up to this size the inverse is formed faster than SuperLU's factors and applied many times faster
LU_ROOM = 3  # above DENSE_MAX, a GPU factorises the coarsest level densely (cuSOLVER's getrf; a solve: getrs) when its
# free memory holds this many n x n float64 matrices
INVERSES = {"gpu": np.float16, "cpu": np.float32}  # storage of the smoothers' inverses: on a GPU float16 scaled per row
# (fem3d.kernels.ebe.quantise), half the bytes of float32 to hold and to read at each smoothing; NumPy's float16
# arithmetic is slow, so float32 on the CPU
GRAPH_ELEMENTS = 65_536  # levels of at most this many elements run their cycles from a CUDA graph (one GPU)
_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="coarse-lu")  # the host factorisation beside the device
SMOOTHING_STEPS = 8  # GMRES steps of each smoothing: fewer let the cycle diverge or slow down on graded boxes, more
# cost time there; long, thin cells want more (the DFG case file asks for 10)


def box_unknowns(grid) -> int:
    """Unknowns of the Q2-Q1 equations on a box of ``grid`` elements."""
    return 3 * int(np.prod([2 * n + 1 for n in grid])) + int(np.prod([n + 1 for n in grid]))


def coarse_grids(grid) -> list:
    """The boxes (nx, ny, nz) below the box ``grid`` in the hierarchy, finest first: a box
    with more than COARSE_MAX unknowns is coarsened, each side of more than MIN_COARSE
    elements to half its elements rounded up (fem3d.solvers.multigrid.split). The same on
    any number of ranks (fem3d.solvers.multigrid.distributed_grids)."""
    grids = []
    if grid is None:
        return grids
    g = tuple(grid)
    while box_unknowns(g) > COARSE_MAX:
        nxt = tuple((n + 1) // 2 if n > MIN_COARSE else n for n in g)
        if nxt == g:
            break
        grids.append(g := nxt)
    return grids


def distributed_grids(grid, parts: int) -> int:
    """How many of coarse_grids(grid) are partitioned across ``parts`` ranks, the rest being
    replicated on every rank (fem3d.solvers.multigrid.Multigrid): of the leading boxes that
    halve the longest side of ``grid`` (the slab axis of fem3d.parallel.partition.slab_owners)
    into pairs of layers with at least LAYERS_PER_RANK layers per rank, the most whose layers,
    as slab units, give a rank at most IMBALANCE_MAX times the mean; where no count does, the
    most with the least imbalance."""
    grids = coarse_grids(grid)
    if parts == 1 or not grids:
        return len(grids)
    axis = int(np.argmax(grid))
    units = [grid[axis]]
    for g in grids:
        if units[-1] % 2 or 2 * g[axis] != units[-1] or g[axis] < LAYERS_PER_RANK * parts or int(np.argmax(g)) != axis:
            break
        units.append(g[axis])
    imbalance = [math.ceil(u / parts) * parts / u for u in units]
    fine = [k for k, x in enumerate(imbalance) if x <= IMBALANCE_MAX]
    return fine[-1] if fine else max(range(len(units)), key=lambda k: (-imbalance[k], k))


def chain(mesh, ranks: int = 1) -> list:
    """``mesh`` and the meshes it refines (fem3d.discretisation.refine) that are levels of its
    hierarchy, finest first: all of them, except that a whole refined mesh solved by one rank
    most of whose elements are stretched (more than STRETCHED of them longer along an axis
    than fem3d.discretisation.coarsen.STRONG times their shortest length) is coarsened by its
    sheets instead, semi-coarsened, and so are the levels below it: the refinements are full
    coarsening, which keeps the elements long. One rank's part of a mesh, or a whole mesh
    solved by ``ranks`` > 1, keeps its refinements: they are cut among the ranks, sheets are
    not."""
    meshes = [mesh]
    while meshes[-1].coarser is not None and (
        ranks > 1 or meshes[-1].whole is not None or (meshes[-1].stretches > STRONG).mean() <= STRETCHED
    ):
        meshes.append(meshes[-1].coarser)
    return meshes


def coarsenings(mesh) -> list:
    """The sheet coarsenings (fem3d.discretisation.coarsen.Coarsening) below ``mesh`` (a whole
    mesh or one rank's part of a mesh that is neither a box nor refined), finest first: while
    a level has more than COARSE_MAX unknowns and coarsens."""
    out, level = [], mesh.whole or mesh
    while level.n_dofs > COARSE_MAX:
        below = level.coarsening
        if below is None:
            break
        out.append(below)
        level = below.coarse
    return out


def _below(last) -> list:
    """The coarse levels below the end ``last`` of a refinement chain: its coarser boxes
    (coarse_grids) or its sheet coarsenings."""
    return coarse_grids(last.grid) if last.grid is not None else coarsenings(last)


def level_sizes(mesh, ranks: int = 1) -> list:
    """Elements of each level below ``mesh`` in its hierarchy on ``ranks`` ranks, finest first:
    the meshes it refines (:func:`chain`) and then the coarse boxes below the box at the end
    of that chain, or the sheet coarsenings below the mesh at its end."""
    meshes = chain(mesh, ranks)
    below = _below(meshes[-1])
    sizes = [m.n_elements for m in meshes[1:]]
    if meshes[-1].grid is not None:
        return sizes + [int(np.prod(grid)) for grid in below]
    return sizes + [c.coarse.n_elements for c in below]


def coarse_levels(mesh) -> int:
    """Levels below ``mesh`` in the multigrid hierarchy (:func:`level_sizes`)."""
    return len(level_sizes(mesh))


def coarse_elements(mesh, ranks: int = 1) -> int:
    """Elements of the levels below ``mesh`` (a whole mesh) in its hierarchy on ``ranks`` ranks, all together."""
    return sum(level_sizes(mesh, ranks))


def coarsest_size(mesh, ranks: int = 1) -> tuple[int, int]:
    """(elements, unknowns) of the coarsest level of ``mesh``'s hierarchy on ``ranks`` ranks (:func:`level_sizes`)."""
    last = chain(mesh, ranks)[-1]
    below = _below(last)
    if not below:
        whole = last.whole or last
        return whole.n_elements, whole.n_dofs
    if last.grid is not None:
        return int(np.prod(below[-1])), box_unknowns(below[-1])
    return below[-1].coarse.n_elements, below[-1].coarse.n_dofs


def alignment(mesh, parts: int) -> int:
    """Element layers per partition unit of the box that ``mesh`` is or refines that keep
    the distributed levels' parents and children on one rank (1 for one rank or a chain that
    does not end in a box)."""
    grid = chain(mesh, parts)[-1].grid
    return 2 ** distributed_grids(grid, parts) if parts > 1 and grid is not None else 1


def split(n: int):
    """(parent (n,), position (n,)) of the n element layers along one side of a box in the
    coarser box: with n > MIN_COARSE, pairs of layers (positions 0 and 1: the lower and upper
    half of their parent) and, for odd n, one layer left whole (position 2) near the middle,
    away from the walls' boundary layers; with n <= MIN_COARSE every layer whole.

    The whole layer is the one nearest the middle whose index is 2 modulo 4 (the lower of
    two): it becomes an odd coarse layer, and an odd box's whole layer has an even index, so
    the next coarsening pairs that thin layer with a neighbour instead of leaving it whole
    again, where it would be much thinner than its neighbours and slow the solves of mesh
    sequencing on that box (docs/solvers.md, measured iteration counts)."""
    layer = np.arange(n)
    if n <= MIN_COARSE:
        return layer, np.full(n, 2)
    whole = 4 * ((n - 2) // 8) + 2 if n % 2 else n  # the fine layer left whole: 2 mod 4, nearest (n - 1) / 2
    shifted = layer + (layer > whole)
    return shifted // 2, np.where(layer == whole, 2, shifted % 2)


REFINED = np.array(
    [0, 1, 3, 4, 9, 10, 12, 13]
)  # position code of refine's child i + 2 j + 4 k (fem3d.discretisation.refine)


def coarser(mesh):
    """(coarse, parent, kinds, transfers) of ``mesh`` (a whole mesh or one rank's part): the
    next coarser whole mesh, the element of it that is each element's parent (E,), the kind
    of child each element is (E,) and the Transfers of those kinds: from the refinement
    (fem3d.discretisation.refine), the box coarsened side by side (:func:`box_coarsening`;
    the coarse box's vertices sit at the fine vertex indices they keep over the fine side's
    element count: nested where the fine box is the uniform unit box), else the sheet
    coarsening (fem3d.discretisation.coarsen)."""
    if len(chain(mesh)) > 1:
        return mesh.coarser, mesh.parent, REFINED[mesh.child_position], Transfers.aligned()
    if mesh.grid is not None:
        grid, kept, parents, position = box_coarsening(mesh)
        coarse = box_mesh(*grid, vertices=[k / k[-1] for k in kept])
        return coarse, coarse.elements_with_ids(parents), position, Transfers.aligned()
    whole = mesh.whole or mesh
    below = whole.coarsening
    at = whole.elements_with_ids(mesh.element_ids) if mesh.whole is not None else slice(None)
    kinds, transfers = Transfers.of(below.code[at], below.rotation[at])
    return below.coarse, below.parent[at], kinds, transfers


def level_below(mesh, comm, backend, cut: bool):
    """(part, parent, kinds, transfers, elements) of the level below ``mesh`` (a whole mesh or
    one rank's part): this rank's part of the coarser mesh (fem3d.parallel.partition.Partition;
    with ``cut`` cut among the ranks of ``comm``, else whole on every rank), each element's
    parent as an element of the whole coarser mesh, the kinds and Transfers of :func:`coarser`,
    and the whole coarser mesh's element count. A coarser box cut into slabs is built from this
    rank's slab and the layers beside it alone (fem3d.parallel.partition.box_part), the same
    part as cut from the whole coarser box."""
    if cut and comm.size > 1 and mesh.grid is not None and len(chain(mesh)) == 1:
        grid, kept, parents, position = box_coarsening(mesh)
        align = 2 ** distributed_grids(grid, comm.size)
        part = box_part(grid, [k / k[-1] for k in kept], comm, backend, align)
        return part, box_order(grid, parents), position, Transfers.aligned(), int(np.prod(grid))
    whole, parent, kinds, transfers = coarser(mesh)
    if cut:  # a refined mesh's part built from its parents alone (fem3d.parallel.partition.refined_part)
        part = distribute(whole, comm, backend, alignment(whole, comm.size))
    else:
        part = distribute(whole, SerialComm(), backend)
    return part, parent, kinds, transfers, whole.n_elements


def box_coarsening(mesh):
    """(grid, kept, parents, position) of the box ``mesh`` (a whole box or one rank's part)
    coarsened side by side (:func:`split`): the coarse box's elements per side, the fine
    vertex indices along each side that are the coarse box's vertices (three int arrays),
    each element's parent as a box element number (x fastest) and its position code."""
    (px, sx), (py, sy), (pz, sz) = sides = [split(n) for n in mesh.grid]
    cx, cy, _ = grid = [int(p[-1]) + 1 for p, _ in sides]
    kept = [np.append(np.flatnonzero(np.diff(p, prepend=-1)), len(p)) for p, _ in sides]
    i, j, k = grid_index(mesh.element_ids, mesh.grid)
    return grid, kept, px[i] + cx * (py[j] + cy * pz[k]), sx[i] + 3 * sy[j] + 9 * sz[k]


def child_boxes(codes) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) (m, 3) of children of position codes ``codes`` (m,): the parent's
    reference coordinates at the child's reference xi are scale * xi + shift along each axis."""
    codes = np.asarray(codes)
    s = np.stack([codes % 3, (codes // 3) % 3, codes // 9], axis=1)  # 0: the lower half, 1: the upper half, 2: whole
    return np.where(s == 2, 1.0, 0.5), np.where(s == 2, 0.0, s - 0.5)


def child_prolongation(code: int, rotation=None) -> np.ndarray:
    """(NL, NL): values of a parent's Q2 velocity (each component) and Q1 pressure at the
    nodes of its child of position code ``code`` = a + 3 b + 9 g (a, b, g the child's
    position along the parent's xi, eta, zeta; 0: the lower half, 1: the upper half, 2: the
    whole parent) whose reference axes are turned by ``rotation`` (3, 3), a signed
    permutation: the child's reference point xi lies at scale * (rotation @ xi) + shift of the
    parent's (child_boxes; fem3d.discretisation.coarsen; None: the parent's axes)."""
    rotation = np.eye(3) if rotation is None else np.asarray(rotation, dtype=float)
    (scale,), (shift,) = child_boxes([code])
    parent_xi = lambda xi: scale * (xi @ rotation.T) + shift  # noqa: E731
    out = np.zeros((NL, NL))
    vel, pres = Q2.values(parent_xi(Q2.nodes)), Q1.values(parent_xi(Q1.nodes))
    for d in range(3):
        out[27 * d : 27 * d + 27, 27 * d : 27 * d + 27] = vel
    out[81:, 81:] = pres
    return out


def child_prolongations() -> np.ndarray:
    """(27, NL, NL): child_prolongation(c) of each position code c, the child's axes along its parent's."""
    return np.stack([child_prolongation(c) for c in range(27)])


@dataclass
class Transfers:
    """The prolongations of one level's children: ``table`` (K, NL, NL) and ``codes`` (K,)
    the position code of each kind of child."""

    codes: np.ndarray
    table: np.ndarray

    @classmethod
    def aligned(cls) -> "Transfers":
        """Children whose axes are their parent's (refined meshes, boxes): kind = position code."""
        return cls(np.arange(27), child_prolongations())

    @classmethod
    def of(cls, code, rotation) -> tuple[np.ndarray, "Transfers"]:
        """(kinds (E,), Transfers) of children of position codes ``code`` (E,) turned by
        ``rotation`` (E, 3, 3): one kind per distinct pair."""
        _, first, kinds = np.unique(child_kinds(code, rotation), return_index=True, return_inverse=True)
        return kinds.reshape(-1), cls(
            code[first], np.stack([child_prolongation(int(code[i]), rotation[i]) for i in first])
        )


class Level:
    """One level: its operator, prescribed unknowns, valence, smoother and, except on the
    coarsest, the transfer to the next coarser level: its elements as children ordered by
    kind (position code and turn), then by their parent's colour, ``child_order`` (Ef,) and
    ``parent_order`` (Ef,) the local fine and coarse elements of the children in that
    order, ``kinds`` a list of (kind k, rows: the slice of that order of the children of
    kind k), ``runs`` the slices of that order of one kind and one parent colour (distinct
    parents sharing no unknown: the restriction's sums into them race-free), ``P``
    (K, NL, NL) the prolongation of each kind (Transfers.table, on the backend). The
    transfers weigh by 1 / valence at the free unknowns, 0 at the prescribed ones (a
    partition of unity; :meth:`free_weights`).

    The operator is an ElementOperator whose matrices are stored (``mats``), or, with
    ``element_matrices(ids) -> (m, NL, LD)`` (the matrices of the local elements ``ids``,
    computed on demand), any operator with matvec, ``dofs`` and the colours (the finest level
    of a sum-factorised system: fem3d.solvers.partial_assembly): the Galerkin product and the
    smoother's blocks then take the matrices ``chunk`` elements at a time, and none is kept
    (so also where they are other matrices than the operator's: Multigrid.kind).
    ``smoother``: the kind of fem3d.solvers.line_vanka.smoother_for."""

    def __init__(self, op, mesh, fixed, valence, element_matrices=None, chunk: int = 8192, smoother: str = "line"):
        self.op, self.mesh, self.xp = op, mesh, op.xp
        self.fixed, self.valence = fixed, valence
        self.element_matrices, self.chunk = element_matrices, chunk
        self.smoother = smoother_for(op, mesh, valence, INVERSES[op.backend.kind], smoother)
        self._by_group, self._smoother_ok = {}, False
        self.kinds = self.runs = self.P = self.child_order = self.parent_order = None
        self.gathered = False
        self.dirichlet = dirichlet_rows(
            self.xp, op.dofs, fixed, valence
        )  # its prescribed rows (coarse levels' Galerkin matrices)

    def free_weights(self):
        """(n,) 1 / valence at the free unknowns, 0 at the prescribed ones (made at each call:
        a vector less to hold on the finest level)."""
        return self.xp.where(self.fixed, 0.0, 1.0 / self.valence)

    def prolong(self, coarse: "Level", xc):
        """P xc (complete on every rank): each child's values interpolated from its parent,
        summed and weighted by 1 / valence (a partition of unity: continuous fields; every child
        at an unknown has its weight, so the sum is weighted once)."""
        op, xp, dense = self.op, self.xp, vectors.for_backend(self.op.backend)
        parents = self.xp.where(coarse.fixed, 0.0, xc)[coarse.op.dofs]  # (Ec, NL)
        vals = xp.empty(op.dofs.shape, dtype=np.float64)  # (Ef, NL) in the fine elements' order
        for c, rows in self.kinds:
            kind = xp.empty((rows.stop - rows.start, NL), dtype=np.float64)
            dense.rows_times(parents[self.parent_order[rows]], self.P[c], kind, transpose=True)
            vals[self.child_order[rows]] = kind
        out = xp.zeros(op.n, dtype=np.float64)
        for a, b in colour_ranges(op.colour_offsets):  # a colour's elements share no unknown: race-free sums
            out[op.dofs[a:b]] += vals[a:b]
        op.dist.sum_interface(out)
        return out * self.free_weights()

    def restrict(self, coarse: "Level", r):
        """P^T r (complete on every rank)."""
        local = (r * self.free_weights())[self.op.dofs]  # (Ef, NL) in the fine elements' order
        restricted = self.xp.empty_like(local)  # in the children's order
        dense = vectors.for_backend(self.op.backend)
        for c, rows in self.kinds:
            dense.rows_times(local[self.child_order[rows]], self.P[c], restricted[rows])
        out = self.xp.zeros(coarse.op.n, dtype=np.float64)
        for run in self.runs:
            out[coarse.op.dofs[self.parent_order[run]]] += restricted[run]
        if self.gathered:
            self.op.dist.allreduce(out)
        else:
            coarse.op.dist.sum_interface(out)
        return self.xp.where(coarse.fixed, 0.0, out)

    def galerkin(self, coarse: "Level") -> None:
        """coarse.op.mats = sum over children of P_c^T A_child P_c with prescribed unknowns
        left out, then the prescribed rows of the coarse level; the children's matrices
        (rounded to the coarse storage) ``chunk`` at a time. Where this level's matrices are
        not stored, they are computed once for this and the smoother's blocks
        (:meth:`_streamed`)."""
        mats = coarse.op.mats
        P = self.P.astype(mats.dtype)
        coarse_free = (~coarse.fixed[coarse.op.dofs]).astype(mats.dtype)
        mats.fill(0.0)
        if self.element_matrices is None:
            for c, rows in self.kinds:
                for s in range(rows.start, rows.stop, self.chunk):
                    at = slice(s, min(s + self.chunk, rows.stop))
                    self._children_add(mats, P[c], self.parent_order[at], self.op.mats[self.child_order[at]], at)
        else:
            self._streamed(mats, P)
        if self.gathered:  # the children of a replicated level's elements live on several ranks
            self.op.dist.allreduce(mats)
        mats *= coarse_free[:, :, None] * coarse_free[:, None, :]
        apply_dirichlet_rows(mats, coarse.dirichlet)

    def _children_add(self, mats, Pc, parents, a, at) -> None:
        """mats[parents] += Pc^T a Pc for the children ``at`` (positions in the children's
        order) of position code c, their matrices ``a`` with prescribed unknowns left out."""
        fine_free = (~self.fixed[self.op.dofs[self.child_order[at]]]).astype(mats.dtype)
        a = a[:, :, :NL] * fine_free[:, :, None] * fine_free[:, None, :]
        mats[parents] += Pc.T @ a @ Pc  # a parent has one child of each position

    def _streamed(self, mats, P) -> None:
        """The Galerkin sums and the smoother's blocks from element matrices computed on
        demand, one target group of the smoother at a time (Vanka.open, add, close): the
        group's children by position code, each element once, then its halo for the blocks
        only."""
        vanka, chunk = self.smoother, self.chunk
        matrices = lambda ids: self.element_matrices(ids).astype(STORAGE)  # noqa: E731
        vanka.begin(matrices)
        for g in range(len(vanka.groups)):
            vanka.open(g)
            for c, rows in self._group_children(g):
                for s in range(0, len(rows), chunk):
                    at = rows[s : s + chunk]
                    ids = self.child_order[at]
                    a = matrices(ids)
                    vanka.add(a, ids)
                    self._children_add(mats, P[c], self.parent_order[at], a, at)
            halo = vanka.halo(g)
            for s in range(0, len(halo), chunk):
                vanka.add(matrices(halo[s : s + chunk]), halo[s : s + chunk])
            vanka.close(g)
        self._smoother_ok = vanka.end()

    def _group_children(self, g: int) -> list:
        """[(kind k, positions in the children's order)] of the children in the smoother's
        target group g (made at the first call)."""
        if g not in self._by_group:
            xp, group = self.xp, self.smoother.groups[g]
            inside = xp.zeros(self.child_order.shape, dtype=bool)
            inside[group] = True
            self._by_group[g] = [
                (c, rows.start + xp.flatnonzero(inside[self.child_order[rows]])) for c, rows in self.kinds
            ]
        return self._by_group[g]

    def smoother_setup(self) -> bool:
        """Invert the smoother's blocks (from the stored matrices; where none are stored,
        :meth:`galerkin` did); False when one is singular."""
        return self.smoother.setup() if self.element_matrices is None else self._smoother_ok


def superlu_bytes(n: int) -> float:
    """Estimated bytes of SuperLU's factors of a coarsest level of ``n`` unknowns (FILL)."""
    per_unknown, at, growth = FILL
    return 12.0 * n * per_unknown * (n / at) ** growth


def direct_fits(n: int) -> bool:
    """A coarsest level of ``n`` unknowns can be solved directly: its SuperLU factors (the
    way every device has) take at most HOST_SHARE of the host's free memory."""
    return superlu_bytes(n) <= HOST_SHARE * host_free_bytes()


def direct_limit() -> int:
    """The most unknowns of a coarsest level that direct_fits allows now."""
    room, low, high = HOST_SHARE * host_free_bytes(), 1, 1 << 40
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if superlu_bytes(mid) <= room else (low, mid - 1)
    return low


def _linalg(backend):
    """SciPy's dense linear algebra (scipy.linalg), or CuPy's (cupyx.scipy.linalg) on a GPU."""
    if backend.is_gpu:
        import cupyx.scipy.linalg as linalg
    else:
        import scipy.linalg as linalg
    return linalg


class CoarseSolve:
    """The coarsest level solved exactly: its assembled matrix (gathered on every rank, float64),
    for an ``enclosed`` flow with the pressure level fixed at one pressure unknown (its row
    and column replaced by a diagonal entry, so that a right-hand side with a component the
    singular matrix cannot produce, such as round-off, does not come back amplified), is
    ``method``:

    inverse  on a GPU up to DENSE_MAX unknowns: inverted as a dense matrix on the device (a
             solve is one product);
    lu       on a GPU above DENSE_MAX where LU_ROOM dense matrices fit its free memory:
             factorised densely on the device (LAPACK's getrf through cuSOLVER, of the
             transpose, which is the C-ordered matrix in Fortran order; a solve is getrs);
    superlu  otherwise: factorised by SuperLU on the host (PERMC_SPEC ordering,
             PIVOT_THRESHOLD; a solve on a GPU moves the right-hand side to the host and back),
             whose factors direct_fits checked before (superlu_bytes). Under MPI (``comm``, the
             run's ranks) rank 0 alone factorises it, whether the level is cut among the ranks
             or held whole by each, and broadcasts each solution (``root``): the ranks of a node share
             its memory and cores, where every rank's own factors would take as many times
             the memory direct_fits allowed. On GPUs each rank inverts or factorises it on
             its own device, with no communication in a solve beyond the right-hand side's sum.

    ``setup()`` starts the SuperLU factorisation in a thread (SuperLU releases the GIL), so
    that it runs while the device builds the smoothers; ``wait()`` (also the first thing a
    solve does) ends it."""

    def __init__(self, level: Level, enclosed: bool, comm):
        self.level, self.enclosed, self.comm = level, enclosed, comm
        dist = level.op.dist
        backend = level.op.backend
        self.gdofs = backend.asarray(dist.gdofs)
        owned = np.flatnonzero(dist.owned)  # indices, not a mask: a solve reads nothing back
        self.owned, self.owned_global = backend.asarray(owned), backend.asarray(dist.gdofs[owned])
        n = self.n_global = dist.n_global
        room = backend.is_gpu and backend.free_bytes() > LU_ROOM * 8 * n * n
        self.method = "superlu" if not backend.is_gpu else "inverse" if n <= DENSE_MAX else "lu" if room else "superlu"
        self.root = self.method == "superlu" and comm.size > 1  # rank 0 of the run alone factorises
        self.pending = self.inverse = self.lu = self._dense_plan = self.pin = None

    def setup(self) -> None:
        op, dist, backend = self.level.op, self.level.op.dist, self.level.op.backend
        self.ok = True
        if self.root and self.comm.rank != 0 and dist.is_serial:  # a level held whole: rank 0 has it too
            return
        if dist.is_serial:
            mats, gd = op.mats[:, :, :NL], self.gdofs[op.dofs.astype(np.int64)]
        else:
            mine = (backend.to_numpy(op.mats)[:, :, :NL], dist.gdofs[backend.to_numpy(op.dofs)])
            pieces = dist.comm.gather(mine) if self.root else dist.comm.allgather(mine)
            if pieces is None:  # rank 0 factorises
                return
            mats, gd = (backend.asarray(np.concatenate(parts)) for parts in zip(*pieces))
        self.pin = (
            int(gd[:, 81:].min()) if self.enclosed else None
        )  # the first pressure unknown: the level is fixed there
        if self.method == "inverse":
            try:
                inverse = self.level.xp.linalg.inv(self._dense(mats, gd))
            except np.linalg.LinAlgError:  # NumPy; CuPy returns non-finite entries instead
                self.ok = False
            else:
                if self.inverse is None:
                    self.inverse = inverse
                else:
                    self.inverse[...] = inverse  # at the address a graph of the cycle reads
                self.ok = vectors.for_backend(backend).all_finite(self.inverse)
        elif self.method == "lu":
            self.lu = None  # its memory, before the next factors take as much again
            with warnings.catch_warnings():  # a singular matrix: told by its zero pivot below, not by a warning
                warnings.simplefilter("ignore")
                # the factors of A^T, whose Fortran order is A's C order (no copy); a solve takes them transposed
                lu, piv = _linalg(backend).lu_factor(self._dense(mats, gd).T, overwrite_a=True, check_finite=False)
            self.ok = vectors.for_backend(backend).all_finite(lu) and bool(
                (backend.to_numpy(self.level.xp.diagonal(lu)) != 0).all()
            )
            self.lu = (lu, piv) if self.ok else None
        else:
            # copies: the thread must not read the level's matrices while a next set-up rewrites them
            self.pending = _THREAD.submit(
                self._factorised, np.array(backend.to_numpy(mats)), np.array(backend.to_numpy(gd))
            )

    def wait(self) -> bool:
        """Wait for the factorisation that setup() started; False when the matrix is singular."""
        if self.pending is not None:
            try:
                self.lu = self.pending.result()
            except RuntimeError:  # SuperLU: "Factor is exactly singular"
                self.lu, self.ok = None, False
            self.pending = None
        return self.ok

    def _dense(self, mats, gd):
        """The assembled matrix (n, n), pin applied, summed on the device."""
        xp, n = self.level.xp, self.n_global
        if self._dense_plan is None:
            self._dense_plan = ScatterPlan(self.level.op.backend, gd[:, :, None] * n + gd[:, None, :])
        dense = self._dense_plan.add(xp.zeros(n * n, dtype=np.float64), mats.astype(np.float64).ravel())
        dense = dense.reshape(n, n)
        if self.pin is not None:
            scale = float(xp.abs(xp.diagonal(dense)).max())
            dense[self.pin, :] = 0.0
            dense[:, self.pin] = 0.0
            dense[self.pin, self.pin] = scale
        return dense

    def _factorised(self, mats, gd):
        """SuperLU of the assembled matrix, pin applied (host)."""
        import scipy.sparse as sp
        from scipy.sparse.linalg import splu

        n = self.n_global
        rows = np.broadcast_to(gd[:, :, None], mats.shape).ravel()
        cols = np.broadcast_to(gd[:, None, :], mats.shape).ravel()
        keep = np.ones(rows.shape, dtype=bool) if self.pin is None else (rows != self.pin) & (cols != self.pin)
        matrix = sp.csc_matrix((mats.astype(np.float64).ravel()[keep], (rows[keep], cols[keep])), shape=(n, n))
        if self.pin is not None:
            matrix += sp.csc_matrix(([abs(matrix.diagonal()).max()], ([self.pin], [self.pin])), shape=(n, n))
        return splu(matrix, permc_spec=PERMC_SPEC, diag_pivot_thresh=PIVOT_THRESHOLD)

    def solve(self, b):
        self.wait()
        level = self.level
        xp, dist, backend = level.xp, level.op.dist, level.op.backend
        full = xp.zeros(self.n_global, dtype=np.float64)
        full[self.owned_global] = b[self.owned]
        dist.allreduce(full)
        if self.pin is not None:
            full[self.pin] = 0.0
        if self.method == "inverse":
            return vectors.for_backend(backend).gemv(self.inverse, full)[self.gdofs]
        if self.method == "lu":
            return _linalg(backend).lu_solve(self.lu, full, trans=1, check_finite=False)[self.gdofs]
        if not self.root:
            return backend.asarray(self.lu.solve(backend.to_numpy(full)))[self.gdofs]
        x = self.lu.solve(backend.to_numpy(full)) if self.comm.rank == 0 else np.empty(self.n_global)
        return backend.asarray(self.comm.bcast_array(x))[self.gdofs]


class Multigrid:
    """The V(1,1)-cycle preconditioner of a NavierStokesSystem on a mesh with ``levels``
    coarser levels (fem3d.solvers.multigrid.coarse_levels; 0: the mesh itself is the coarsest
    level, solved directly), smoothed by ``smoother`` (fem3d.solvers.line_vanka.SMOOTHERS).
    ``setup()`` after an assembly (the finest matrices, Galerkin coarse matrices, smoothers,
    coarse factorisation; False when a Vanka block or the coarsest level is singular on some
    rank), or ``refresh()`` to keep all but the finest matrices; ``apply(r, out)``: out =
    one cycle applied to r.

    Where some level smooths by lines (``smoother`` "line": ``frozen``), the hierarchy of a
    Newton Jacobian J(x) is built from J(x) with the test functions frozen at x
    (fem3d.problems.navier_stokes.LINEARISATIONS): the finest level's smoother blocks and
    Galerkin product take those matrices, computed chunk by chunk, while its operator stays
    J(x). On the iterates before convergence the levels of J(x) itself cost lines their
    advantage (measured with line patches of three elements: docs/solvers.md, line Vanka)."""

    def __init__(self, system, levels: int, smoothing_steps: int = SMOOTHING_STEPS, smoother: str = "line"):
        mesh, dist, backend = system.mesh, system.dist, system.backend
        self.xp, self.steps = backend.xp, smoothing_steps
        comm = dist.comm
        self.system = system
        elements, streamed = system.elements, system.elements is None and levels > 0
        self.streamed = streamed
        if streamed:  # the system's sum-factorised operator; matrices computed chunk by chunk at each set-up
            fine = system.op
        elif elements is not None and elements.mats.dtype == STORAGE:
            fine = elements
        else:  # a rounded copy of the system's matrices (or of those it computes, for a coarsest level)
            fine = ElementOperator(
                backend, system.dofs, mesh.colour_offsets, system.n, dist, STORAGE, getattr(system.op, "row_sums", None)
            )
        self.levels = [
            Level(
                fine,
                mesh,
                system.fixed,
                system.valence,
                system.element_matrices if streamed else None,
                system.chunk,
                smoother,
            )
        ]
        meshes = chain(mesh)
        partitioned = len(meshes) - 1 + distributed_grids(meshes[-1].grid, comm.size)  # levels below: replicated
        for k in range(1, levels + 1):
            part, parent, kinds, transfers, elements = level_below(
                self.levels[-1].mesh, comm, backend, k <= partitioned
            )
            local = np.full(elements, -1, dtype=np.int64)
            local[part.elements] = np.arange(len(part.elements))
            coarse = part.mesh
            op = ElementOperator(backend, coarse.dofs(), coarse.colour_offsets, coarse.n_dofs, part.dist, STORAGE)
            valence = part.dist.sum_interface(backend.asarray(coarse.dof_valence()))
            fixed = self._children(
                self.levels[-1],
                coarse,
                op.dofs,
                local[parent],
                kinds,
                transfers,
                gathered=comm.size > 1 and k == partitioned + 1,
            )
            self.levels.append(Level(op, coarse, fixed, valence, chunk=system.chunk, smoother=smoother))
        lines = any(isinstance(level.smoother, LineVanka) for level in self.levels[:-1])
        self.frozen = dist.allreduce_scalar(float(lines)) > 0  # every rank alike
        self.direct = CoarseSolve(self.levels[-1], system.problem.enclosed, comm)
        self.cycles = 0
        self.graphed = None  # the first level whose cycles replay a CUDA graph
        if backend.is_gpu and comm.size == 1 and self.direct.method == "inverse":
            self.graphed = next(
                k
                for k, level in enumerate(self.levels)
                if level.op.dofs.shape[0] <= GRAPH_ELEMENTS or k == len(self.levels) - 1
            )
            self._graph = Replayed(self.xp, lambda b: self._v_cycle(self.graphed, b))

    def _children(self, fine: Level, coarse, coarse_dofs, parent, kinds, transfers, gathered: bool = False):
        """Set the fine level's transfer (kinds, runs, P, child_order, parent_order) to the
        coarse level whose (part of the) mesh is ``coarse``, its elements' unknowns
        ``coarse_dofs`` (Ec, NL) (on the backend), whose local element ``parent``
        (E_fine,) is each fine element's parent, the element being its child of kind
        ``kinds`` (E_fine,) among ``transfers`` (Transfers). The unknowns of the children
        and parents are gathered on the backend (the fine level's stay on the device).
        Returns the coarse level's prescribed unknowns (where its nodes coincide with
        prescribed fine nodes). ``gathered``: the coarse level is replicated on every rank
        and the fine one partitioned, so the coarse sums of the children add over the ranks
        (Level.gathered)."""
        backend = fine.op.backend
        fine.gathered = gathered
        total = fine.op.dist.allreduce if gathered else (lambda a: a)
        if (parent < 0).any():
            raise ValueError("multigrid: a parent element lives on another rank (partition not aligned)")
        volume = np.prod(child_boxes(transfers.codes[kinds])[0], axis=1)  # each child's share of its parent
        if not np.allclose(total(np.bincount(parent, volume, minlength=coarse.n_elements)), 1.0):
            raise ValueError("multigrid: a child element lives on another rank (partition not aligned)")
        colours = len(coarse.colour_offsets)
        colour = np.searchsorted(coarse.colour_offsets, parent, side="right")  # each child's parent's colour, + 1
        order = np.lexsort((colour, kinds))
        key = (kinds * colours + colour)[order]
        starts = np.flatnonzero(np.diff(key, prepend=-1))
        fine.runs = [slice(int(a), int(b)) for a, b in zip(starts, np.append(starts[1:], len(key)))]
        counts = np.bincount(kinds, minlength=len(transfers.codes))
        ends = np.cumsum(counts)
        fine.child_order, fine.parent_order = backend.asarray(order), backend.asarray(parent[order])
        child_dofs = fine.op.dofs[fine.child_order]  # gathered where the dofs live (the device)
        parent_dofs = coarse_dofs[fine.parent_order]
        fixed = backend.xp.zeros(coarse.n_dofs, dtype=bool)
        fine.kinds = []
        for c in np.flatnonzero(counts):
            rows = slice(int(ends[c] - counts[c]), int(ends[c]))
            child_pos, parent_pos = (
                backend.asarray(a) for a in np.nonzero(np.abs(transfers.table[c] - 1.0) < 1e-12)
            )  # coinciding nodes
            fixed[parent_dofs[rows, parent_pos]] = fine.fixed[child_dofs[rows, child_pos]]  # repeats agree
            fine.kinds.append((int(c), rows))
        fine.P = backend.asarray(transfers.table)
        return backend.asarray(total(fixed.astype(np.float64)) > 0)

    def refresh(self) -> None:
        """Copy the system's current matrices into the finest level (rounded to STORAGE;
        computed chunk by chunk where the system stores none); nothing to do where the
        finest level holds the system's own matrices or its sum-factorised operator."""
        fine, system = self.levels[0], self.system
        if fine.op is system.op or fine.op is system.elements:
            return
        if system.elements is not None:
            fine.op.mats[...] = system.elements.mats
            return
        every = self.xp.arange(fine.op.dofs.shape[0])
        for s in range(0, len(every), fine.chunk):
            fine.op.mats[s : s + fine.chunk] = system.element_matrices(every[s : s + fine.chunk])

    @property
    def kind(self) -> str | None:
        """The linearisation (LINEARISATIONS) the hierarchy is built from: the system's last, or
        "frozen" in place of "newton" where lines smooth."""
        kind = self.system.linearisation_kind
        return "frozen" if self.frozen and kind == "newton" else kind

    def setup(self) -> bool:
        """Build the hierarchy for the system's current matrices (of :attr:`kind`); False when
        a Vanka block or the coarsest level is singular (on some rank)."""
        self.refresh()
        system, kind, finest = self.system, self.kind, self.levels[0]
        if kind != system.linearisation_kind:
            finest.element_matrices = lambda ids: system.element_matrices(ids, kind)
        else:
            finest.element_matrices = system.element_matrices if self.streamed else None
        ok = True
        for fine, coarse in zip(self.levels, self.levels[1:]):
            fine.galerkin(coarse)
        self.direct.setup()
        for level in self.levels[:-1]:
            ok = level.smoother_setup() and ok
        ok = self.direct.wait() and ok
        dist = self.levels[0].op.dist
        return dist.allreduce_scalar(0.0 if ok else 1.0) == 0.0

    def _smooth(self, level: Level, x, b, steps: int):
        return gmres_steps(level.op, b, x, level.smoother, steps)

    def _cycle(self, k: int, b):
        """The V-cycle from level k for the right-hand side b; from the graph at the first graphed level."""
        if k == self.graphed:
            return self._graph(b)
        return self._v_cycle(k, b)

    def _v_cycle(self, k: int, b):
        level = self.levels[k]
        if k == len(self.levels) - 1:
            return self.direct.solve(b)
        x = self._smooth(level, None, b, self.steps)
        r = b - level.op.matvec(x, self.xp.empty_like(b))
        coarse = self.levels[k + 1]
        x += level.prolong(coarse, self._cycle(k + 1, level.restrict(coarse, r)))
        return self._smooth(level, x, b, self.steps)

    def apply(self, r, out):
        self.cycles += 1
        out[...] = self._cycle(0, r)
        return out

    def traffic(self) -> dict:
        """What the hierarchy is and sent on this rank: V-cycles applied, the coarse solve
        (CoarseSolve.method and unknowns), the linearisation it was built from (:attr:`kind`),
        and per level (finest first) its elements and unknowns here, its smoother, whether it
        is partitioned, its interface sums and the entries they sent. The finest level's count
        is every interface sum of the system's unknowns (the Krylov method's products and the
        residuals too)."""
        return {
            "v_cycles": self.cycles,
            "coarse_solve": {
                "method": self.direct.method,
                "unknowns": self.direct.n_global,
                "factorised_on": "rank 0" if self.direct.root else "every rank",
            },
            "matrices": self.kind,
            "levels": [
                {
                    "elements": int(level.op.dofs.shape[0]),
                    "unknowns": int(level.op.n),
                    "smoother": level.smoother.name,
                    "partitioned": not level.op.dist.is_serial,
                    "interface_sums": level.op.dist.sums,
                    "values_sent": level.op.dist.values_sent,
                }
                for level in self.levels
            ],
        }
