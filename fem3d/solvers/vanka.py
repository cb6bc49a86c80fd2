"""Element Vanka smoothing for the saddle-point systems on Q2-Q1 hexahedral meshes.

For every element e, the block B_e = R_e A R_e^T of the ASSEMBLED matrix A restricted to
the element's 89 unknowns (27 u, 27 v, 27 w, 8 p; velocity and pressure solved together)
is inverted once per linearisation; one smoothing application is the additive sum

    z = sum_e R_e^T W_e B_e^-1 R_e r,        W_e = diag(1 / valence)

(valence: elements sharing an unknown, so the weights form a partition of unity). That
is an element-by-element product with stored matrices W_e B_e^-1, so the fem3d.kernels.ebe
products (NumPy reference and CUDA kernel) apply it. The blocks are summed in float32 (or
float64) a slab of target elements at a time, inverted and stored in the storage the
level asks for (fem3d.solvers.multigrid.INVERSES: float16 scaled per row on a GPU, float32
on the CPU): a smoother needs no more, and it reads a half or a quarter of float64's bytes.

B_e needs the contributions of the element's neighbours (the elements sharing a node with
it): from neighbour f, the entries of A_f whose row and column are both unknowns e shares
with f. Which local positions of e and f those are depends on how the two meet; the
distinct ways ("patterns": the shared positions ia of e and ja of f) are few, 26 on a
structured box, so each element lists its neighbours and their patterns, and
fem3d.kernels.vanka (NumPy reference and CUDA kernel) adds each element matrix to its own
block and its neighbours'. The matrices may come in chunks and need not be stored: a level
whose operator is sum-factorised (fem3d.solvers.partial_assembly) computes them a chunk at a
time. Entries whose row and column are shared with another rank get that rank's partial
sums (fem3d.solvers.operators.cross_plan).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import to_numpy

from ..kernels import ebe, vanka as vanka_kernels, vectors
from ..kernels.ebe import LD, NL
from .operators import ElementOperator, cross_plan, peer_pair_sums

GROUP = 65536  # target elements whose blocks are summed at a time (a float32 scratch of 2.1 GB)
CHUNK = {"gpu": 8192, "cpu": 128}  # elements per batch of inverses (bounds the temporaries; on the CPU, temporaries
# of a few MB stay in the heap, while fresh pages of larger ones cost more than the arithmetic)


def element_neighbours(mesh, xp=np) -> tuple:
    """(nbr, pattern, ia, ja, starts) of the elements of ``mesh`` (this rank's part), arrays
    of ``xp`` (the sorting runs there: on a GPU a fraction of the host's time): nbr (E, K)
    int32 the neighbours of each element (elements sharing a node with it; -1 pads to the
    largest count K), pattern (E, K) int32 the pattern of each, and the patterns' shared
    positions ia, ja (int32) concatenated, pattern p at ia[starts[p]:starts[p + 1]] (local
    unknowns of the element, increasing) and the same slice of ja (the same unknowns as
    local unknowns of the neighbour)."""
    n_elem = mesh.n_elements
    pcells = mesh.pressure_cells
    k = pcells.shape[1]
    flat = xp.asarray(pcells.ravel())
    order = xp.argsort(flat, kind="stable")  # incidences (element * k + local vertex) grouped by vertex
    elem, local = order // k, order % k
    first = xp.flatnonzero(xp.diff(flat[order], prepend=-1))
    size = xp.diff(xp.append(first, len(flat)))
    each = xp.repeat(size, size)  # group size at each incidence
    ends = xp.cumsum(each)
    total = int(ends[-1])
    mine = xp.repeat(xp.arange(len(flat)), each)  # every ordered pair (mine, theirs) of incidences at one vertex
    theirs = xp.repeat(xp.repeat(first, size), each) + xp.arange(total) - xp.repeat(ends - each, each)
    keep = elem[mine] != elem[theirs]
    mine, theirs = mine[keep], theirs[keep]
    key = elem[mine] * n_elem + elem[theirs]
    by_pair = xp.argsort(key, kind="stable")
    key, mine, theirs = key[by_pair], mine[by_pair], theirs[by_pair]
    new = xp.diff(key, prepend=-1) != 0
    e, f = elem[mine[new]], elem[theirs[new]]  # element pairs sharing a vertex, sorted by element
    # the pattern follows from which vertex of f each shared vertex of e is (the shared Q2 nodes are those of the
    # shared vertices, edges and faces): code sum_l (vertex of f at e's vertex l, plus 1) 16^l, summed over each run
    # of one key by differences of an int64 prefix sum (exact; no bincount: see fem3d.kernels.vectors on CuPy's
    # reductions)
    weights = (local[theirs] + 1) * (16 ** xp.arange(k, dtype=np.int64))[local[mine]]
    last = xp.append(new[1:], True)[: len(new)]  # the last entry of each run
    codes = xp.diff(xp.cumsum(weights)[last], prepend=0)
    _, firsts, pattern_of = xp.unique(codes, return_index=True, return_inverse=True)
    ia, ja = [], []
    for a, b in zip(to_numpy(e[firsts]), to_numpy(f[firsts])):
        q2a, q2b = np.nonzero(mesh.cells[a][:, None] == mesh.cells[b][None, :])
        q1a, q1b = np.nonzero(pcells[a][:, None] == pcells[b][None, :])
        ia.append(np.concatenate([q2a, q2a + 27, q2a + 54, q1a + 81]))
        ja.append(np.concatenate([q2b, q2b + 27, q2b + 54, q1b + 81]))
    starts_of = xp.searchsorted(e, xp.arange(n_elem + 1))  # e is sorted: each element's pairs in one run
    counts = xp.diff(starts_of)
    slot = xp.arange(len(e)) - starts_of[e]
    nbr = xp.full((n_elem, int(to_numpy(counts).max()) if n_elem else 0), -1, dtype=np.int32)
    pattern = xp.zeros(nbr.shape, dtype=np.int32)
    nbr[e, slot], pattern[e, slot] = f, pattern_of.reshape(-1)
    starts = xp.asarray(np.cumsum([0] + [len(a) for a in ia]).astype(np.int32))
    as_int32 = lambda parts: xp.asarray(np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32))  # noqa: E731
    return nbr, pattern, as_int32(ia), as_int32(ja), starts


def target_groups(mesh, size: int, xp=np) -> list:
    """The elements of ``mesh`` in groups of at most ``size`` (``xp`` int32 arrays, each
    sorted): slabs across the mesh's longest extent, by the elements' centre nodes, so that
    a group's neighbours outside it are few."""
    n_elem = mesh.n_elements
    count = -(-n_elem // size) if n_elem else 1
    if count == 1:
        return [xp.arange(n_elem, dtype=np.int32)]
    centres = mesh.points[mesh.cells[:, 13]]  # node (1, 1, 1) of the tensor order: the element's centre
    lo, hi = mesh.bounds()
    axis = int(np.argmax(hi - lo))
    order = np.argsort(centres[:, axis], kind="stable")
    return [xp.asarray(np.sort(part).astype(np.int32)) for part in np.array_split(order, count)]


class Vanka:
    """The element Vanka smoother of one level: ``setup()`` after the level's element
    matrices changed, then ``apply(r, out)``: out = sum_e R_e^T W_e B_e^-1 R_e r (complete on
    every rank). ``op`` the level's operator (its ``dofs`` (E, NL), colours, ``n`` and
    ``dist``; setup() reads its stored ``mats``), ``mesh`` its (part of the) box,
    ``valence`` (n,) elements sharing each unknown, all ranks'; ``storage`` the dtype of the
    inverses: float16 (scaled per row, fem3d.kernels.ebe), float32 or float64.

    The blocks are summed GROUP target elements at a time (``groups``: slabs of the mesh)
    in a scratch array of the storage's precision (float32 for float16), inverted, weighted
    and stored. A level whose matrices are not stored gives them in chunks instead:
    ``begin(matrices)``, then for each group g ``open(g)``, ``add(mats, ids)`` of the
    group's elements and of its halo (``halo(g)``: the neighbours outside it), ``close(g)``,
    and ``end()``. ``own`` (E,) bool (host): the elements that keep an inverse where not all
    do (fem3d.solvers.line_vanka: the others' blocks serve the subclass, whose groups then
    list the elements that keep one first, ``_kept[g]`` of them); ``table``: the neighbour
    table where the subclass made it already (:func:`element_neighbours`)."""

    name = "element Vanka"

    def __init__(self, op, mesh, valence, storage, own=None, table=None):
        self.op = op
        xp, backend = op.xp, op.backend
        self.table = element_neighbours(mesh, xp) if table is None else table  # nbr, pattern, ia, ja, starts
        self._accumulate, self._invert = vanka_kernels.for_backend(backend), vanka_kernels.inverse_for_backend(backend)
        self.valence = valence  # the level's own array (no copy): its inverse weights the blocks' rows at set-up
        n_elem = op.dofs.shape[0]
        self._place = None  # each element's row of the stored inverses (-1: none), where not every element has one
        self._kept = None  # per group, how many of its first targets keep an inverse, where not every element does
        if own is None:
            self.inverses = ElementOperator(
                backend, op.dofs, op.colour_offsets, op.n, op.dist, storage, getattr(op, "row_sums", None)
            )
        else:
            kept = np.cumsum(np.concatenate([[0], own]))[np.asarray(op.colour_offsets)]  # the colours of the kept
            place = np.full(n_elem, -1, dtype=np.int32)
            place[own] = np.arange(int(own.sum()), dtype=np.int32)
            self._place = xp.asarray(place)
            self.inverses = ElementOperator(backend, op.dofs[xp.asarray(own)], kept, op.n, op.dist, storage)
        self.scratch_dtype = np.dtype(np.float32 if storage == np.float16 else storage)
        self.groups = target_groups(mesh, GROUP, xp)
        self._slot = xp.full(n_elem, -1, dtype=np.int32)  # a chunk's row of each of its elements, for add()
        self._every = xp.arange(n_elem, dtype=np.int32)
        self._halos, self._peers, self._scratch, self._open, self._ok, self._cross = {}, [], None, None, None, None
        self.xp = xp

    def setup(self) -> bool:
        """Blocks from the level's stored matrices, inverted; False when one is singular."""
        self.begin()
        for g in range(len(self.groups)):
            self.open(g)
            self.add(self.op.mats)
            self.close(g)
        return self.end()

    def targets(self, g: int):
        """The elements whose blocks group g sums: its own."""
        return self.groups[g]

    def halo(self, g: int):
        """The elements outside group g whose matrices its blocks need: its targets' and
        their neighbours (sorted int32; made at the first call)."""
        if g not in self._halos:
            xp, targets = self.xp, self.targets(g)
            inside = xp.zeros(self._every.shape, dtype=bool)
            inside[self.groups[g]] = True
            near = xp.concatenate([self.table[0][targets].ravel(), targets])
            near = near[near >= 0]
            self._halos[g] = xp.unique(near[~inside[near]]).astype(np.int32)
        return self._halos[g]

    @property
    def cross_plan(self) -> dict:
        """fem3d.solvers.operators.cross_plan of every element's unknowns; made at the first call."""
        if self._cross is None:
            self._cross = cross_plan(self.op.backend, self.op.dofs, self.op.n, self.op.dist)
        return self._cross

    def begin(self, matrices=None) -> None:
        """Start a set-up: the peers' partial sums of the entries whose row and column this
        rank shares with them, from the element matrices of the elements holding such
        entries (``matrices(ids)`` (m, NL, LD), or the stored ones); collective."""
        self._ok, self._peers, plan = None, [], self.cross_plan
        if not plan:
            return
        if matrices is None:
            sources = [(self.op.mats, self._every)]
        else:  # the elements holding shared entries, CHUNK at a time
            holders = self.xp.unique(self.xp.concatenate([pos // (NL * LD) for pos, _, _, _ in plan.values()])).astype(
                np.int32
            )
            step = CHUNK[self.op.backend.kind]
            sources = self._rows_of(matrices, (holders[s : s + step] for s in range(0, len(holders), step)))
        _, theirs = peer_pair_sums(plan, self.op.dist, sources)
        self._peers = [(pos, theirs[q][seg]) for q, (pos, seg, _, _) in plan.items()]

    def _rows_of(self, matrices, chunks):
        """(matrices(ids), each element's row of them) for each ``ids`` of ``chunks``, the rows
        valid until the next is taken (fem3d.solvers.operators.peer_pair_sums)."""
        for ids in chunks:
            self._slot[ids] = self._every[: len(ids)]
            yield matrices(ids), self._slot
            self._slot[ids] = -1

    def open(self, g: int) -> None:
        """Zero the blocks of group g."""
        self._open = g
        self._scratch = self.xp.zeros((len(self.targets(g)), NL, NL), dtype=self.scratch_dtype)

    def add(self, mats, ids=None) -> None:
        """Add the element matrices ``mats`` (m, NL, LD) of the elements ``ids`` (m,) (None:
        all, in order) to the open group's blocks: each element's whole matrix to its own
        block, its entries on unknowns shared with a neighbour to the neighbour's
        (fem3d.kernels.vanka)."""
        slot = self._every if ids is None else self._slot
        if ids is not None:
            slot[ids] = self._every[: len(ids)]
        self._accumulate(mats, slot, self.targets(self._open), *self.table, self._scratch)
        if ids is not None:
            slot[ids] = -1

    def close(self, g: int) -> None:
        """Add the peers' sums to group g's blocks, then invert, weight and store them
        (:meth:`store`)."""
        targets, blocks = self.targets(g), self._scratch
        if self._peers:
            flat, size = blocks.reshape(-1), NL * LD
            self._slot[targets] = self._every[: len(targets)]
            for pos, values in self._peers:
                row = self._slot[pos // size]
                keep = row >= 0
                rc = pos % size
                flat[(row.astype(np.int64) * NL * NL + (rc // LD) * NL + rc % LD)[keep]] += values[keep].astype(
                    blocks.dtype
                )
            self._slot[targets] = -1
        self.store(g, blocks)
        self._scratch = self._open = None

    def store(self, g: int, blocks) -> None:
        """Invert the blocks of group g's elements that keep an inverse, weight them and
        store them CHUNK at a time (rounded per row to float16 where that is the storage)."""
        targets, store = self.targets(g), self.inverses
        chunk = CHUNK[self.op.backend.kind]
        count = len(targets) if self._kept is None else self._kept[g]  # the targets that keep one come first
        for first in range(0, count, chunk):
            at, block = targets[first : min(first + chunk, count)], blocks[first : min(first + chunk, count)]
            place = at if self._place is None else self._place[at]
            try:
                rows = self._invert(block)
            except np.linalg.LinAlgError:
                self._ok = False
                continue
            rows /= self.valence[self.op.dofs[at]][:, :, None]
            if store.row_scale is None:
                store.mats[place] = rows
            else:
                ebe.quantise(rows, store.mats, store.row_scale, place)

    def end(self) -> bool:
        """True when every block was invertible: the inverses (and row scales) finite; one
        read-back each."""
        if self._ok is False:
            return False
        store, finite = self.inverses, vectors.for_backend(self.op.backend).all_finite
        return finite(store.mats) and (store.row_scale is None or finite(store.row_scale))

    def apply(self, r, out):
        return self.inverses.matvec(r, out)
