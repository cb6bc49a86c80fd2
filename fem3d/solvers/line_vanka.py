"""Line Vanka: element Vanka widened across long, thin cells.

Element Vanka (fem3d.solvers.vanka) inverts each element's block of the assembled matrix.
Where cells are much longer than thick (boundary layers, thin gaps), the unknowns of one
element couple as strongly to those of its neighbours across its two large faces as to
each other, and the pressure there is left to the coarse levels, which keep the long
directions' resolution and cannot mend it: the smoothing stalls. Line Vanka takes for each
such element its patch, the element and its neighbours across the faces normal to its
shortest axis (up to 3 elements in a row, 89 + 2 x 58 = 205 unknowns), and keeps the rows
of the element's own unknowns of the inverse of the patch's block of the assembled matrix
(restricted additive Schwarz):

    z = sum_e R_e^T W_e [B_patch(e)^-1]_(rows of e) R_patch(e) r,    W_e = diag(1 / valence)

an element-by-element product with NL x K matrices (fem3d.kernels.ebe with ``cols``: the
element's unknowns, then each neighbour's 58 not shared with it), so its output and
weights are element Vanka's.

The rows come from blocks of at most 89 unknowns, which element Vanka's summation and
inverse kernel already give. On a conforming hexahedral mesh two unknowns couple only
inside an element, so the patch's block is [[B_e, C], [C', D]] with B_e the element's
Vanka block, and for each neighbour s its unknowns not shared with e coupled only to the 31
shared ones (the face), by entries of s's Vanka block B_s, and to each other by B_s's
58 x 58 block D_s (the two neighbours, on opposite faces, share no unknown: where they
would, the line keeps one). With S = B_e - sum_s P_s' B_s[f, o] D_s^-1 B_s[o, f] P_s (the
Schur complement; f the face's unknowns, o the others, P_s placing the face in e), the
element's rows are [S^-1, -S^-1 P_s' B_s[f, o] D_s^-1 for each s]: two inverses of 58 and
one of 89 per element, and batched matrix products.

With ``--smoother line`` (SMOOTHERS) a level's smoother is line Vanka where some element
of its mesh is more than LINE_STRETCH times longer than thick
(fem3d.discretisation.mesh.HexMesh.stretches), element Vanka otherwise
(:func:`smoother_for`); elements below it, at a wall or next to another rank's elements
have fewer neighbours in their patch (none: element Vanka's rows). It is not the default:
on one H100 the boundary-layer channel refined twice (4.2 M unknowns) stalls with it in
its last Newton steps, where element Vanka converges (docs/solvers.md).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import to_numpy
from ..discretisation.coarsen import face_neighbours
from ..kernels.ebe import NL
from .vanka import Vanka, element_neighbours

SMOOTHERS = ("element", "line")  # --smoother: element Vanka on every level, or line Vanka where cells are long
LINE_STRETCH = 8.0  # a level with an element longer than this many times its thickness smooths by lines


def long_cells(mesh) -> np.ndarray:
    """(E,) bool: the elements of ``mesh`` more than LINE_STRETCH times longer than thick."""
    return mesh.stretches > LINE_STRETCH


def element_lines(mesh) -> np.ndarray | None:
    """(E, 3) int64 each element of ``mesh`` (this rank's part) and its neighbours across its
    two faces normal to its shortest reference axis, -1 where there is none or where the
    element is at most LINE_STRETCH times longer than thick; None where no element is."""
    stretched = long_cells(mesh)
    if not stretched.any():
        return None
    thin = np.argmin(mesh.axis_lengths, axis=1)
    neighbour, _ = face_neighbours(mesh.pressure_cells)  # (E, 6): faces (axis, side) in FACES order
    rows = np.arange(mesh.n_elements)
    across = np.stack([neighbour[rows, 2 * thin], neighbour[rows, 2 * thin + 1]], axis=1)
    across[~stretched] = -1
    return np.concatenate([rows[:, None], across], axis=1)


FACE = 31  # unknowns two face neighbours share: 9 nodes (u, v, w) and 4 pressure vertices
OTHER = NL - FACE  # a neighbour's unknowns not on the shared face


def line_sides(members: np.ndarray, nbr: np.ndarray, pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sides, patterns) (E, 2) int64: each element's line neighbours of ``members`` (E, 3)
    (:func:`element_lines`), the present ones first, -1 after them; the second dropped where
    it shares a node with the first; and the neighbour pattern of each (the Vanka table
    ``nbr``, ``pattern`` (E, K): fem3d.solvers.vanka.element_neighbours), -1 where none."""
    across = members[:, 1:].copy()
    first_missing = across[:, 0] < 0
    across[first_missing] = across[first_missing][:, ::-1]
    rows = np.arange(len(members))
    a, b = across[:, 0], across[:, 1]
    touching = (b >= 0) & (nbr[np.maximum(a, 0)] == b[:, None]).any(axis=1)
    across[touching, 1] = -1
    patterns = np.full(across.shape, -1, dtype=np.int64)
    for j in range(2):
        present = across[:, j] >= 0
        slot = np.argmax(nbr[rows[present]] == across[present, j][:, None], axis=1)
        patterns[present, j] = pattern[rows[present], slot]
    return across, patterns


def face_tables(ia: np.ndarray, ja: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mine, theirs, others) (P, FACE), (P, FACE), (P, OTHER) int64 of each neighbour
    pattern (fem3d.solvers.vanka.element_neighbours): the face's unknowns as the element's
    local unknowns and as the neighbour's, and the neighbour's unknowns off the face; rows of
    -1 for patterns that are not a shared face."""
    count = len(starts) - 1
    mine, theirs = np.full((count, FACE), -1), np.full((count, FACE), -1)
    others = np.full((count, OTHER), -1)
    for p in range(count):
        a, b = ia[starts[p] : starts[p + 1]], ja[starts[p] : starts[p + 1]]
        if len(a) == FACE:
            mine[p], theirs[p] = a, b
            others[p] = np.setdiff1d(np.arange(NL), b)
    return mine, theirs, others


class LineVanka(Vanka):
    """Line Vanka of one level (module docstring): element Vanka's summation of the blocks,
    each group's targets widened by its lines' neighbours outside it; ``store`` forms each
    element's rows from its own and its neighbours' blocks. ``members`` (E, 3) as
    :func:`element_lines`."""

    name = "line Vanka"

    def __init__(self, op, mesh, valence, storage, members: np.ndarray):
        xp = op.xp
        table = element_neighbours(mesh, xp)
        nbr, pattern, ia, ja, starts = (to_numpy(a).astype(np.int64) for a in table)
        sides, patterns = line_sides(members, nbr, pattern)
        mine, theirs, others = face_tables(ia, ja, starts)
        dofs = to_numpy(op.dofs).astype(np.int64)
        used = int((sides >= 0).any(axis=0).sum())
        cols = [dofs]
        for j in range(used):
            present = sides[:, j] >= 0
            block = np.repeat(dofs[:, :1], OTHER, axis=1)  # absent: zero columns at the element's first unknown
            block[present] = np.take_along_axis(dofs[sides[present, j]], others[patterns[present, j]], axis=1)
            cols.append(block)
        super().__init__(op, mesh, valence, storage, np.concatenate(cols, axis=1), table)
        self.sides, self.patterns = xp.asarray(sides[:, :used]), xp.asarray(patterns[:, :used])
        self.mine, self.theirs, self.others = xp.asarray(mine), xp.asarray(theirs), xp.asarray(others)
        self._targets = []
        for group in self.groups:
            outside = xp.zeros(self._every.shape, dtype=bool)
            extra = self.sides[group].ravel()
            outside[extra[extra >= 0]] = True
            outside[group] = False
            self._targets.append(xp.concatenate([group, xp.flatnonzero(outside).astype(np.int32)]))
        self._row = xp.full(op.dofs.shape[0], -1, dtype=np.int64)  # each target's row of the open group's blocks

    def targets(self, g: int):
        """Group g's elements, then their lines' neighbours outside it."""
        return self._targets[g]

    def store(self, g: int, blocks) -> None:
        """Vanka.store with each element's rows formed from its own and its neighbours'
        blocks (module docstring)."""
        targets = self.targets(g)
        self._row[targets] = self.xp.arange(len(targets))
        super().store(g, blocks)
        self._row[targets] = -1

    def _rows(self, at, own, blocks):
        """(m, NL, K) the rows of the elements ``at`` of the open group (module docstring),
        from their blocks ``own`` and the targets' ``blocks`` (their neighbours')."""
        xp = self.xp
        schur = own.copy()
        couplings = []
        for j in range(self.sides.shape[1]):
            side = self.sides[at, j]
            present = xp.flatnonzero(side >= 0)
            p = self.patterns[at[present], j]
            b = blocks[self._row[side[present]]]
            face, off, mine = self.theirs[p], self.others[p], self.mine[p]
            q = xp.arange(len(present))[:, None, None]
            d_inv = self._invert(xp.ascontiguousarray(b[q, off[:, :, None], off[:, None, :]]))
            t = b[q, face[:, :, None], off[:, None, :]] @ d_inv  # (q, FACE, OTHER): B_s[f, o] D_s^-1
            correction = t @ b[q, off[:, :, None], face[:, None, :]]  # (q, FACE, FACE)
            schur[present[:, None, None], mine[:, :, None], mine[:, None, :]] -= correction
            couplings.append((present, mine, t))
        s_inv = self._invert(schur)
        rows = xp.zeros((len(at), NL, self.inverses.mats.shape[2]), dtype=s_inv.dtype)
        rows[:, :, :NL] = s_inv
        for j, (present, mine, t) in enumerate(couplings):
            columns = xp.take_along_axis(s_inv[present], mine[:, None, :], axis=2)  # S^-1 P_s'
            rows[present, :, NL + j * OTHER : NL + (j + 1) * OTHER] = -(columns @ t)
        return rows


def line_levels(meshes) -> int:
    """How many of ``meshes`` (a hierarchy's levels) ``--smoother line`` smooths by lines."""
    return sum(bool(long_cells(mesh).any()) for mesh in meshes)


def smoother_for(op, mesh, valence, storage, kind: str = "element"):
    """The smoother ``kind`` (SMOOTHERS) of a level (operator ``op`` on ``mesh``, this
    rank's part): for "line", line Vanka where an element is more than LINE_STRETCH times
    longer than thick; element Vanka otherwise."""
    members = element_lines(mesh) if kind == "line" else None
    if members is None:
        return Vanka(op, mesh, valence, storage)
    return LineVanka(op, mesh, valence, storage, members)
