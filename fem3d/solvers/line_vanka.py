"""Line Vanka: element Vanka widened to whole lines of long, thin cells.

Element Vanka (fem3d.solvers.vanka) inverts each element's block of the assembled matrix.
Where cells are much longer than thick (boundary layers, thin gaps), the unknowns of one
element couple as strongly to those of its neighbours across its two large faces as to
each other, and the pressure there is left to the coarse levels, which keep the long
directions' resolution and cannot mend it: the smoothing stalls. Line Vanka solves instead,
for each line of such cells (a chain of elements, each joined to the next across a face
normal to its shortest axis: a boundary layer's cells from the wall outward, a gap's from
one side to the other), the block of the assembled matrix on all the line's unknowns, and
adds the solution with element Vanka's weights:

    z = sum_lines R_l^T W_l M_l^-1 R_l r + sum_(e on no line) R_e^T W_e B_e^-1 R_e r,

W_l giving each unknown of line l 1 / valence for each of its elements there, so the
weights are element Vanka's partition of unity (a line of one element is element Vanka).

On a conforming hexahedral mesh two unknowns couple only inside an element, so M_l is made
of the line's element Vanka blocks B_k (the summation and inverse of element Vanka), and
it is block tridiagonal: with the unknowns of element k other than those of the face it
shares with element k - 1 (its back face) as X_k (58; the first element all its 89, each
X_k listing first the face shared with element k + 1), M_l has the diagonal blocks
B_k[X_k, X_k], below them B_k[X_k, back] and above them B_k[back, X_k] (the back face of
element k being the first 31 unknowns of X_(k-1)). Block Gaussian elimination along the
line, without pivoting between blocks (with partial pivoting inside each inverse), keeps

    D_0 = B_0,  D_k = B_k[X_k, X_k] - B_k[X_k, back] (D_(k-1)^-1)[face, face] B_k[back, X_k],

the inverses of the D_k, and B_k's two coupling blocks: about 7,000 numbers per element
(element Vanka's inverse: 7,921). A smoothing step is a sweep forward and one back along
every line at once, a batch of small products per position (the lines stored longest
first, so the lines still running at a position are a prefix).

With ``--smoother line`` (SMOOTHERS) a level's smoother is line Vanka where some element
of its mesh is more than LINE_STRETCH times longer than thick
(fem3d.discretisation.mesh.HexMesh.stretches), element Vanka otherwise
(:func:`smoother_for`). Lines are this rank's: a line stops at another rank's elements.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import to_numpy
from ..discretisation.coarsen import face_neighbours
from ..kernels.ebe import NL
from ..kernels.scatter import ScatterPlan
from ..kernels import vectors
from .vanka import Vanka, element_neighbours

SMOOTHERS = ("line", "element")  # --smoother: line Vanka where cells are long (default), or element Vanka everywhere
LINE_STRETCH = 8.0  # a level with an element longer than this many times its thickness smooths by lines
FACE = 31  # unknowns two face neighbours share: 9 nodes (u, v, w) and 4 pressure vertices
REST = NL - FACE  # an element's unknowns off one of its faces


def long_cells(mesh) -> np.ndarray:
    """(E,) bool: the elements of ``mesh`` more than LINE_STRETCH times longer than thick."""
    return mesh.stretches > LINE_STRETCH


def element_lines(mesh) -> np.ndarray | None:
    """(N, L) int64 the lines of ``mesh`` (this rank's part), longest first, each its
    elements in order and -1 after them; None where no element is more than LINE_STRETCH
    times longer than thick.

    A stretched element is joined to the elements across its two faces normal to its
    shortest reference axis, where that element is not stretched or is joined back (its own
    shortest axis crosses the same face); an element that is not stretched keeps one such
    join (the first). A chain that closes on itself (a ring) is cut open and loses one
    element; chains are cut where an element would share a vertex with the element two
    before it (the block tridiagonal structure needs it); chains of one element are left to
    element Vanka."""
    stretched = long_cells(mesh)
    if not stretched.any():
        return None
    joins = element_joins(mesh, stretched)
    walks = chain_walks(joins, np.flatnonzero((joins >= 0).sum(axis=1) == 1))
    last = walks[np.arange(len(walks)), (walks >= 0).sum(axis=1) - 1]
    walks = [walks[walks[:, 0] <= last]]  # each chain once, from its end of smaller index
    seen = np.zeros(len(joins), dtype=bool)
    seen[walks[0][walks[0] >= 0]] = True
    ring = np.flatnonzero(~seen & (joins[:, 1] >= 0))
    while len(ring):  # a ring: cut between its first element e and e's first join f, walk from e to f, and leave
        e = ring[0]  # f out of it (it shares a face with e)
        f = joins[e, 0]
        joins[e] = [joins[e, 1], -1]
        joins[f] = [joins[f, 0] if joins[f, 0] != e else joins[f, 1], -1]
        walk = chain_walks(joins, np.array([e]))
        seen[walk[walk >= 0]] = True
        walk[walk == f] = -1
        walks.append(walk)
        ring = ring[~seen[ring]]
    return cut_folds(walks, mesh.pressure_cells)


def element_joins(mesh, stretched: np.ndarray) -> np.ndarray:
    """(E, 2) int64 the elements each element of ``mesh`` is joined to in a line, -1 where
    none (the first column filled first): :func:`element_lines`' rule."""
    thin = np.argmin(mesh.axis_lengths, axis=1)
    neighbour, neighbour_face = face_neighbours(mesh.pressure_cells)  # (E, 6): faces (axis, side)
    a = np.repeat(np.flatnonzero(stretched), 2)
    faces = 2 * thin[a] + np.tile([0, 1], len(a) // 2)
    b, b_face = neighbour[a, faces], neighbour_face[a, faces]
    keep = b >= 0
    a, b, b_face = a[keep], b[keep], b_face[keep]
    mutual = ~stretched[b] | (b_face // 2 == thin[b])
    pairs = np.unique(np.sort(np.stack([a[mutual], b[mutual]], axis=1), axis=1), axis=0)
    loose = np.where(stretched[pairs[:, 0]], pairs[:, 1], pairs[:, 0])  # the end that is not stretched, if any
    first = np.ones(len(pairs), dtype=bool)
    free = ~stretched[loose]
    _, at = np.unique(loose[free], return_index=True)
    first[np.flatnonzero(free)] = False
    first[np.flatnonzero(free)[at]] = True  # an element that is not stretched keeps its first join
    pairs = pairs[first]
    ends = pairs.ravel()
    order = np.argsort(ends, kind="stable")
    slot = np.zeros(len(ends), dtype=np.int64)
    repeated = np.flatnonzero(np.diff(ends[order]) == 0) + 1
    slot[order[repeated]] = 1  # a stretched element's second join
    joins = np.full((len(stretched), 2), -1, dtype=np.int64)
    joins[ends, slot] = pairs[:, ::-1].ravel()
    return joins


def chain_walks(joins: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(S, L) int64 the chains of ``joins`` (:func:`element_joins`, no rings) walked from
    ``starts`` (ends of chains), all at once, -1 after each chain's end."""
    column, previous = starts.copy(), np.full(len(starts), -1)
    columns = []
    while (column >= 0).any():
        columns.append(column)
        on = column >= 0
        ahead = joins[np.maximum(column, 0)]
        step = np.where(ahead[:, 0] != previous, ahead[:, 0], ahead[:, 1])
        previous, column = column, np.where(on, step, -1)
    return np.stack(columns, axis=1) if columns else np.zeros((0, 1), dtype=np.int64)


def cut_folds(walks: list, vertices: np.ndarray) -> np.ndarray | None:
    """(N, L) int64 the lines (:func:`element_lines`) of the chains ``walks`` ((S, L) arrays
    of :func:`chain_walks`), each cut before an element sharing a vertex with the element two
    before it; lines of one element dropped; None where none is left."""
    pieces = []
    for walk in walks:
        fold = np.zeros(walk.shape, dtype=bool)
        if walk.shape[1] > 2:
            now, before = vertices[np.maximum(walk[:, 2:], 0)], vertices[np.maximum(walk[:, :-2], 0)]
            shared = (now[:, :, :, None] == before[:, :, None, :]).any(axis=(2, 3))
            fold[:, 2:] = shared & (walk[:, 2:] >= 0)
        segment = np.cumsum(fold, axis=1)
        row, k = np.nonzero(walk >= 0)
        key = row * (walk.shape[1] + 1) + segment[row, k]
        _, line, length = np.unique(key, return_inverse=True, return_counts=True)
        position = k - np.minimum.reduceat(k, np.flatnonzero(np.diff(key, prepend=-1)))[line]
        piece = np.full((len(length), walk.shape[1]), -1, dtype=np.int64)
        piece[line, position] = walk[row, k]
        pieces.append(piece[length > 1])
    width = max(p.shape[1] for p in pieces)
    lines = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in pieces])
    if not len(lines):
        return None
    lines = lines[np.argsort(-(lines >= 0).sum(axis=1), kind="stable")]
    return lines[:, : (lines >= 0).sum(axis=1).max()]


def face_tables(ia: np.ndarray, ja: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mine, theirs) (P, FACE) int64 of each neighbour pattern
    (fem3d.solvers.vanka.element_neighbours): a shared face's unknowns as the element's
    local unknowns and as the neighbour's, in one order; rows of -1 for patterns that are
    not a shared face."""
    count = len(starts) - 1
    mine, theirs = np.full((count, FACE), -1), np.full((count, FACE), -1)
    for p in range(count):
        a, b = ia[starts[p] : starts[p + 1]], ja[starts[p] : starts[p + 1]]
        if len(a) == FACE:
            mine[p], theirs[p] = a, b
    return mine, theirs


def line_orders(lines: np.ndarray, nbr: np.ndarray, pattern: np.ndarray, mine, theirs) -> np.ndarray:
    """(N, L, NL) int64 each line element's local unknowns in the line's order: the first
    element's face shared with the second, then its others; every later element's back face
    (shared with the element before it, in that element's order), then its face shared with
    the next element (where there is one), then its others (increasing). -1 rows after a
    line's end. ``nbr``, ``pattern``: the Vanka table (element_neighbours); ``mine``,
    ``theirs``: :func:`face_tables`."""
    n_lines, length = lines.shape
    orders = np.full((n_lines, length, NL), -1, dtype=np.int64)

    def face(e, f):  # (e's local unknowns, f's) of the face the elements e and f (arrays) share
        slot = np.argmax(nbr[e] == f[:, None], axis=1)
        p = pattern[e, slot]
        return mine[p], theirs[p]

    for k in range(length):
        on = np.flatnonzero(lines[:, k] >= 0)
        ahead = lines[on, k + 1] >= 0 if k + 1 < length else np.zeros(len(on), dtype=bool)
        for going in (True, False):  # elements with a next one in the line, then the line's last ones
            rows = on[ahead == going]
            if not len(rows):
                continue
            e = lines[rows, k]
            head = [face(e, lines[rows, k - 1])[0]] if k else []
            if going:
                head.append(face(lines[rows, k + 1], e)[1])
            head = np.concatenate(head, axis=1) if head else np.zeros((len(rows), 0), dtype=np.int64)
            inside = np.zeros((len(rows), NL), dtype=bool)
            np.put_along_axis(inside, head, True, axis=1)
            rest = np.argsort(inside, axis=1, kind="stable")[:, : NL - head.shape[1]]
            orders[rows, k] = np.concatenate([head, rest], axis=1)
    return orders


class LineVanka(Vanka):
    """Line Vanka of one level (module docstring): element Vanka's summation of the blocks,
    in target groups that hold whole lines, the elements on no line first; those keep element
    Vanka's stored inverses, each line its block elimination (``store``). ``lines`` (N, L) as
    :func:`element_lines`. The elimination is kept in float32 (float64 where the storage is)."""

    name = "line Vanka"

    def __init__(self, op, mesh, valence, storage, lines: np.ndarray):
        xp = op.xp
        table = element_neighbours(mesh, xp)
        nbr, pattern, ia, ja, starts = (to_numpy(a).astype(np.int64) for a in table)
        on_line = np.zeros(mesh.n_elements, dtype=bool)
        on_line[lines[lines >= 0]] = True
        super().__init__(op, mesh, valence, storage, own=~on_line, table=table)
        group_of = np.empty(mesh.n_elements, dtype=np.int64)  # element Vanka's slabs, each line in its first element's
        for g, group in enumerate(self.groups):
            group_of[to_numpy(group)] = g
        for k in range(1, lines.shape[1]):
            on = lines[:, k] >= 0
            group_of[lines[on, k]] = group_of[lines[on, 0]]
        kept = [np.flatnonzero((group_of == g) & ~on_line) for g in range(len(self.groups))]  # element Vanka's
        lined = [np.flatnonzero((group_of == g) & on_line) for g in range(len(self.groups))]
        self.groups = [xp.asarray(np.concatenate([a, b]).astype(np.int32)) for a, b in zip(kept, lined)]
        self._kept = [len(a) for a in kept]
        self._lines_of = [np.flatnonzero(group_of[lines[:, 0]] == g) for g in range(len(self.groups))]
        self.lines = lines
        self.counts = (lines >= 0).sum(axis=0)  # (L,) lines still running at each position: a prefix of them
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])  # each position's first row in the tables below
        orders = line_orders(lines, nbr, pattern, *face_tables(ia, ja, starts))
        self.elements = xp.asarray(np.concatenate([lines[:c, k] for k, c in enumerate(self.counts)]))
        order = np.concatenate([orders[:c, k] for k, c in enumerate(self.counts)])  # (M, NL)
        self.order = xp.asarray(order)
        dofs = to_numpy(op.dofs).astype(np.int64)
        unknowns = np.take_along_axis(dofs[to_numpy(self.elements)], order, axis=1)  # (M, NL) in the line's order
        self.unknowns = xp.asarray(unknowns)
        self.line_weights = xp.asarray(1.0 / to_numpy(valence))[self.unknowns]
        self.plan = ScatterPlan(op.backend, unknowns)
        place = np.arange(len(order) * NL).reshape(len(order), NL)  # the entries of apply's w (M, NL)
        value_index = place.copy()  # each value's entry of w
        for k in range(1, len(self.counts)):
            start, stop, previous = self.offsets[k], self.offsets[k + 1], self.offsets[k - 1]
            value_index[start:stop, :FACE] = place[previous : previous + stop - start, :FACE]
            value_index[start:stop, FACE:] = place[start:stop, :REST]
        self.value_index = xp.asarray(value_index)
        self._gemv = vectors.for_backend(op.backend).batched_gemv
        dtype = np.float64 if storage == np.float64 else np.float32
        m, first = len(order), int(self.counts[0])
        self.first_inverse = xp.zeros((first, NL, NL), dtype=dtype)  # D_0^-1 of each line
        self.inverse = xp.zeros((m - first, REST, REST), dtype=dtype)  # D_k^-1 of the later positions
        self.below = xp.zeros((m - first, REST, FACE), dtype=dtype)  # B_k[X_k, back]
        self.above = xp.zeros((m - first, FACE, REST), dtype=dtype)  # B_k[back, X_k]
        self._row = xp.full(op.dofs.shape[0], -1, dtype=np.int64)  # each target's row of the open group's blocks

    def store(self, g: int, blocks) -> None:
        """Vanka.store for the group's elements on no line, then the block elimination along
        each of its lines (module docstring)."""
        super().store(g, blocks)
        xp, lines, targets = self.xp, self._lines_of[g], self.targets(g)
        if not len(lines):
            return
        self._row[targets] = xp.arange(len(targets))
        dtype = self.inverse.dtype
        corner = None  # (D_(k-1)^-1)[face, face] of the group's lines still running
        for k, count in enumerate(self.counts):
            ids = lines[lines < count]  # the group's lines running at position k: a prefix of ``lines``
            if not len(ids):
                break
            rows = self.offsets[k] + xp.asarray(ids)
            order = self.order[rows]
            q = xp.arange(len(ids))[:, None, None]
            b = blocks[self._row[self.elements[rows]]][q, order[:, :, None], order[:, None, :]].astype(dtype)
            try:
                if k == 0:
                    inverse = self._invert(b)
                    self.first_inverse[rows] = inverse
                else:
                    below, above = b[:, FACE:, :FACE], b[:, :FACE, FACE:]
                    d = b[:, FACE:, FACE:] - below @ corner[: len(ids)] @ above
                    inverse = self._invert(xp.ascontiguousarray(d))
                    at = rows - self.counts[0]
                    self.inverse[at], self.below[at], self.above[at] = inverse, below, above
            except np.linalg.LinAlgError:
                self._ok = False
                break
            corner = inverse[:, :FACE, :FACE]
        self._row[targets] = -1

    def end(self) -> bool:
        """Vanka.end, and the lines' inverses finite."""
        finite = vectors.for_backend(self.op.backend).all_finite
        return super().end() and finite(self.first_inverse) and finite(self.inverse)

    def apply(self, r, out):
        """out = the smoothing of ``r`` (module docstring), complete on every rank: for the lines
        a sweep forward (w_k = D_k^-1 (r_k - B_k[X_k,
        back] w_(k-1)[face])) and one back (x_(k-1) = w_(k-1) - D_(k-1)^-1[:, face] B_k[back,
        X_k] x_k), each position's products over its lines at once (fem3d.kernels.vectors
        .batched_gemv: no cuBLAS, so the cycle can be captured into a CUDA graph), then element
        Vanka's product with the lines' sums added."""
        xp, gemv = self.xp, self._gemv
        first, counts = int(self.counts[0]), self.counts
        local = r[self.unknowns].astype(self.inverse.dtype)  # (M, NL) each line element's unknowns, the line's order
        w = xp.empty_like(local)  # w_k, then x_k: (NL) at position 0, (REST) after it
        gemv(self.first_inverse, local[:first], w[:first])
        for k in range(1, len(counts)):
            here, before, at = self._rows(k)
            gemv(self.below[at], w[before, :FACE], local[here, FACE:], -1.0, True)
            gemv(self.inverse[at], local[here, FACE:], w[here, :REST])
        t = xp.empty((first, FACE), dtype=local.dtype)
        for k in range(len(counts) - 1, 0, -1):
            here, before, at = self._rows(k)
            n = int(counts[k])
            gemv(self.above[at], w[here, :REST], t[:n])
            if k == 1:
                gemv(self.first_inverse[:n, :, :FACE], t[:n], w[before], -1.0, True)
            else:
                previous = self._rows(k - 1)[2]
                gemv(self.inverse[previous.start : previous.start + n, :, :FACE], t[:n], w[before, :REST], -1.0, True)
        values = w.ravel()[self.value_index] * self.line_weights  # (M, NL) each line element's, weighted
        lines = self.plan.add(xp.zeros(out.shape, dtype=np.float64), values.ravel())
        return self.inverses.matvec(r, out, add=lines)  # one interface sum, as element Vanka's on a rank without lines

    def _rows(self, k: int) -> tuple[slice, slice, slice]:
        """(here, before, at): position k's rows of the (M, ...) arrays, the rows of the same
        lines at position k - 1, and position k's rows of the later positions' tables."""
        first, start, stop = int(self.counts[0]), int(self.offsets[k]), int(self.offsets[k + 1])
        previous = int(self.offsets[k - 1])
        return slice(start, stop), slice(previous, previous + stop - start), slice(start - first, stop - first)


def line_levels(meshes) -> int:
    """How many of ``meshes`` (a hierarchy's levels) ``--smoother line`` smooths by lines."""
    return sum(bool(long_cells(mesh).any()) for mesh in meshes)


def smoother_for(op, mesh, valence, storage, kind: str = "line"):
    """The smoother ``kind`` (SMOOTHERS) of a level (operator ``op`` on ``mesh``, this
    rank's part): for "line", line Vanka where some element is more than LINE_STRETCH times
    longer than thick; element Vanka otherwise."""
    lines = element_lines(mesh) if kind == "line" else None
    if lines is None:
        return Vanka(op, mesh, valence, storage)
    return LineVanka(op, mesh, valence, storage, lines)
