"""Element Vanka smoothing for the saddle-point systems on Q2-Q1 hexahedral meshes.

For every element e, the block B_e = R_e A R_e^T of the ASSEMBLED matrix A restricted to
the element's 89 unknowns (27 u, 27 v, 27 w, 8 p; velocity and pressure solved together)
is inverted once per linearisation; one smoothing application is the additive sum

    z = sum_e R_e^T W_e B_e^-1 R_e r,        W_e = diag(1 / valence)

(valence: elements sharing an unknown, so the weights form a partition of unity). That
is an element-by-element product with stored matrices W_e B_e^-1, so the fem3d.kernels.ebe
products (NumPy reference and CUDA kernel) apply it. The blocks are summed, inverted and
stored in the precision of the level's matrices (float32 in fem3d.solvers.multigrid), in
place: a smoother needs no more, and it halves the bytes each application reads.

B_e needs the contributions of the element's neighbours (the elements sharing a node with
it): from neighbour f, the entries of A_f whose row and column are both unknowns e shares
with f. Which local positions of e and f those are depends on how the two meet; the
distinct ways ("patterns": the shared positions ia of e and ja of f) are few, 26 on a
structured box, so each element lists its neighbours and their patterns, and
fem3d.kernels.vanka (NumPy reference and CUDA kernel) adds each element matrix to its own
block and its neighbours'. The matrices may come in chunks and need not be stored: a level
whose operator is sum-factorised (fem3d.solvers.partial_assembly) computes them a chunk at a
time. Entries whose row and column are shared with another rank get that rank's partial
sums (fem3d.solvers.operators.ElementOperator.cross_plan).
"""
from __future__ import annotations

import numpy as np

from gpucfd.backend import to_numpy

from ..kernels import vanka as vanka_kernels
from ..kernels.ebe import NL
from .operators import ElementOperator

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
    # shared vertices, edges and faces): code sum_l (vertex of f at e's vertex l, plus 1) 16^l, exact in float64
    weights = (local[theirs] + 1) * (16.0 ** xp.arange(k))[local[mine]]
    codes = xp.bincount(xp.cumsum(new) - 1, weights=weights).astype(np.int64)
    _, firsts, pattern_of = xp.unique(codes, return_index=True, return_inverse=True)
    ia, ja = [], []
    for a, b in zip(to_numpy(e[firsts]), to_numpy(f[firsts])):
        q2a, q2b = np.nonzero(mesh.cells[a][:, None] == mesh.cells[b][None, :])
        q1a, q1b = np.nonzero(pcells[a][:, None] == pcells[b][None, :])
        ia.append(np.concatenate([q2a, q2a + 27, q2a + 54, q1a + 81]))
        ja.append(np.concatenate([q2b, q2b + 27, q2b + 54, q1b + 81]))
    counts = xp.bincount(e, minlength=n_elem)
    slot = xp.arange(len(e)) - xp.repeat(xp.cumsum(counts) - counts, counts)
    nbr = xp.full((n_elem, int(counts.max()) if n_elem else 0), -1, dtype=np.int32)
    pattern = xp.zeros(nbr.shape, dtype=np.int32)
    nbr[e, slot], pattern[e, slot] = f, pattern_of.reshape(-1)
    starts = xp.asarray(np.cumsum([0] + [len(a) for a in ia]).astype(np.int32))
    as_int32 = lambda parts: xp.asarray(np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32))  # noqa: E731
    return nbr, pattern, as_int32(ia), as_int32(ja), starts


class Vanka:
    """The element Vanka smoother of one level: ``setup()`` after the level's element
    matrices changed (or, for a level whose matrices are not stored, ``begin()``, ``add()``
    of every element's matrix in chunks, then ``finish()``), then ``apply(r, out)``:
    out = sum_e R_e^T W_e B_e^-1 R_e r (complete on every rank). ``op`` the level's operator
    (its ``dofs`` (E, NL), colours, ``n`` and ``dist``; setup() reads its stored ``mats``),
    ``mesh`` its (part of the) box, ``valence`` (n,) elements sharing each unknown, all ranks';
    ``storage`` the dtype of the blocks and inverses."""

    def __init__(self, op, mesh, valence, storage):
        self.op = op
        xp, backend = op.xp, op.backend
        self.table = element_neighbours(mesh, xp)  # nbr, pattern, ia, ja, starts
        self._accumulate, self._invert = vanka_kernels.for_backend(backend), vanka_kernels.inverse_for_backend(backend)
        self.weights = 1.0 / valence
        self.inverses = ElementOperator(backend, op.dofs, op.colour_offsets, op.n, op.dist, storage)
        n_elem = op.dofs.shape[0]
        self._slot = xp.full(n_elem, -1, dtype=np.int32)  # the chunk's row of each element in add()
        self._every = xp.arange(n_elem, dtype=np.int32)
        self._peer_sums = None
        self.xp = xp

    def setup(self) -> bool:
        """Blocks from the level's stored matrices (one chunk), inverted: :meth:`finish`."""
        self.begin()
        self.add(self.op.mats)
        return self.finish()

    def begin(self) -> None:
        """Zero the blocks (held where the inverses go) and the sums for the peers."""
        self.inverses.mats.fill(0.0)
        plan = self.inverses.cross_plan
        self._peer_sums = {q: self.xp.zeros(m, dtype=np.float64) for q, (_, _, _, m) in plan.items()}

    def add(self, mats, ids=None) -> None:
        """Add the element matrices ``mats`` (m, NL, LD) of the elements ``ids`` (m,) (None:
        all, in order) to the blocks: each element's whole matrix to its own block, its
        entries on unknowns shared with a neighbour to the neighbour's (fem3d.kernels.vanka);
        and to the sums for the peers, the entries whose row and column another rank shares."""
        slot = self._every if ids is None else self._slot
        if ids is not None:
            slot[ids] = self._every[:len(ids)]
        self._accumulate(mats, slot, *self.table, self.inverses.mats)
        flat, size = mats.reshape(-1), NL * mats.shape[2]
        for q, (pos, seg, _, m) in self.inverses.cross_plan.items():
            row = slot[pos // size]
            keep = row >= 0
            values = flat[(row.astype(np.int64) * size + pos % size)[keep]]
            self._peer_sums[q] += self.xp.bincount(seg[keep], weights=values.astype(np.float64), minlength=m)
        if ids is not None:
            slot[ids] = -1

    def finish(self) -> bool:
        """Add the peers' partial sums of the shared entries to the blocks, invert and weight
        them CHUNK at a time, in place; False when a block is singular (the smoother, and so
        the preconditioner, is then undefined)."""
        xp, blocks = self.xp, self.inverses.mats
        if self._peer_sums:
            theirs = {q: xp.empty_like(a) for q, a in self._peer_sums.items()}
            self.inverses.dist.exchange(self._peer_sums, theirs)
            flat = blocks.reshape(-1)
            for q, (pos, seg, _, _) in self.inverses.cross_plan.items():
                flat[pos] += theirs[q][seg].astype(blocks.dtype)
        dofs, n_elem = self.op.dofs, blocks.shape[0]
        chunk = CHUNK[self.op.backend.kind]
        for first in range(0, n_elem, chunk):
            last = min(first + chunk, n_elem)
            try:
                inv = self._invert(blocks[first:last, :, :NL])
            except np.linalg.LinAlgError:
                return False
            inv *= self.weights[dofs[first:last]][:, :, None]
            blocks[first:last] = inv
        return bool(xp.isfinite(blocks).all())  # one read-back, after every chunk

    def apply(self, r, out):
        return self.inverses.matvec(r, out)
