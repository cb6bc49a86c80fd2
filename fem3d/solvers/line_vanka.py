"""Line Vanka: element Vanka widened across long, thin cells.

Element Vanka (fem3d.solvers.vanka) inverts each element's block of the assembled matrix.
Where cells are much longer than thick (boundary layers, thin gaps), the unknowns of one
element couple as strongly to those of its neighbours across its two large faces as to
each other, and the pressure there is left to the coarse levels, which keep the long
directions' resolution and cannot mend it: the smoothing stalls. Line Vanka takes for each
such element its patch, the element and its neighbours across the faces normal to its
shortest axis (up to 3 elements, K <= 205 unknowns), inverts the patch's block of the
assembled matrix and keeps the rows of the element's own unknowns (restricted additive
Schwarz):

    z = sum_e R_e^T W_e [B_patch(e)^-1]_(rows of e) R_patch(e) r,    W_e = diag(1 / valence)

an element-by-element product with NL x K matrices (fem3d.kernels.ebe with ``cols``), so
its output and weights are element Vanka's. A patch's block is read off the element blocks
of its members, which element Vanka's summation gives: on a conforming hexahedral mesh two
unknowns couple only inside an element, so every entry of a patch's block whose row and
column lie in one member is that member's block entry, and all others are zero. Elements
that are not stretched, and those at a boundary or another rank's elements, make shorter
patches (an element alone: its element Vanka block).

A level's smoother is line Vanka where some element of its mesh is more than LINE_STRETCH
times longer than thick (fem3d.discretisation.mesh.HexMesh.stretches), element Vanka
otherwise (:func:`smoother_for`).
"""

from __future__ import annotations

import numpy as np

from ..discretisation.coarsen import face_neighbours
from ..kernels.ebe import NL
from .vanka import Vanka

LINE_STRETCH = 8.0  # a level with an element longer than this many times its thickness smooths by lines
LINE_CHUNK = {"gpu": 1024, "cpu": 64}  # patches per batch of inverses (K x K each: 168 kB in float32 at K = 205)


def element_lines(mesh) -> np.ndarray | None:
    """(E, 3) int64 each element of ``mesh`` (this rank's part) and its neighbours across its
    two faces normal to its shortest reference axis, -1 where there is none or where the
    element is at most LINE_STRETCH times longer than thick; None where no element is."""
    stretched = mesh.stretches > LINE_STRETCH
    if not stretched.any():
        return None
    thin = np.argmin(mesh.axis_lengths, axis=1)
    neighbour, _ = face_neighbours(mesh.pressure_cells)  # (E, 6): faces (axis, side) in FACES order
    rows = np.arange(mesh.n_elements)
    across = np.stack([neighbour[rows, 2 * thin], neighbour[rows, 2 * thin + 1]], axis=1)
    across[~stretched] = -1
    return np.concatenate([rows[:, None], across], axis=1)


def patch_unknowns(dofs: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cols, pos) of the patches of ``members`` (E, M) (element ids, -1 for none; column 0
    the element itself) on the unknowns ``dofs`` (E, NL): cols (E, K) int32 each patch's
    distinct unknowns in increasing order, padded with its first; pos (E, M, NL) int32 the
    position in cols of each member's local unknowns (-1 rows for absent members)."""
    n, m = members.shape
    own = np.where(members >= 0, members, np.arange(n)[:, None])
    flat = dofs[own].reshape(n, m * NL)
    order = np.argsort(flat, axis=1, kind="stable")
    ranked = np.take_along_axis(flat, order, axis=1)
    first = np.ones(ranked.shape, dtype=bool)
    first[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    rank_sorted = np.cumsum(first, axis=1) - 1
    rank = np.empty_like(rank_sorted)
    np.put_along_axis(rank, order, rank_sorted, axis=1)
    width = int(rank_sorted[:, -1].max()) + 1 if n else 1
    cols = np.repeat(ranked[:, :1], width, axis=1)
    row, at = np.nonzero(first)
    cols[row, rank_sorted[row, at]] = ranked[row, at]
    pos = rank.reshape(n, m, NL)
    pos[members < 0] = -1
    return cols.astype(np.int32), pos.astype(np.int32)


class LineVanka(Vanka):
    """Line Vanka of one level (module docstring): element Vanka's summation of the blocks,
    each group's targets widened by its patches' members outside it; ``store`` builds each
    element's patch block from its members' blocks, inverts it and keeps the element's rows.
    ``members`` (E, 3) as :func:`element_lines`."""

    name = "line Vanka"

    def __init__(self, op, mesh, valence, storage, members: np.ndarray):
        backend = op.backend
        cols, pos = patch_unknowns(backend.to_numpy(op.dofs).astype(np.int64), members)
        super().__init__(op, mesh, valence, storage, cols)
        xp = self.xp
        self.width = cols.shape[1]
        self.pos = xp.asarray(pos)
        self.members = xp.asarray(members)
        self._targets = []
        for group in self.groups:
            outside = xp.zeros(self._every.shape, dtype=bool)
            extra = self.members[group, 1:].ravel()
            outside[extra[extra >= 0]] = True
            outside[group] = False
            self._targets.append(xp.concatenate([group, xp.flatnonzero(outside).astype(np.int32)]))
        self._row = xp.full(op.dofs.shape[0], -1, dtype=np.int64)  # each target's row of the open group's blocks

    def targets(self, g: int):
        """Group g's elements, then the members of their patches outside it."""
        return self._targets[g]

    def store(self, g: int, blocks) -> None:
        """Each patch block of group g's elements from the members' ``blocks`` (the identity
        on a patch's padding); the element's rows of its inverse (LU solves) weighted and
        stored, LINE_CHUNK patches at a time."""
        xp, group, targets, k = self.xp, self.groups[g], self.targets(g), self.width
        self._row[targets] = xp.arange(len(targets))
        chunk = LINE_CHUNK[self.op.backend.kind]
        flat_blocks = blocks.reshape(len(targets), NL * NL)
        for first in range(0, len(group), chunk):
            at = group[first : first + chunk]
            m = len(at)
            patch = xp.zeros((m, k, k), dtype=blocks.dtype)
            patch[:, xp.arange(k), xp.arange(k)] = 1.0
            flat = patch.reshape(m * k * k)
            for slot in range(self.members.shape[1]):
                member = self.members[at, slot]
                present = xp.flatnonzero(member >= 0)
                p = self.pos[at[present], slot].astype(np.int64)  # (q, NL)
                to = (present[:, None, None] * k + p[:, :, None]) * k + p[:, None, :]
                flat[to.reshape(-1)] = flat_blocks[self._row[member[present]]].reshape(-1)
            unit = xp.zeros((m, k, NL), dtype=patch.dtype)  # the element's own columns of the identity
            unit[xp.arange(m)[:, None], self.pos[at, 0], xp.arange(NL)] = 1.0
            try:  # the element's rows of the inverse: B^T Y = unit, rows = Y^T
                rows = xp.linalg.solve(patch.transpose(0, 2, 1), unit).transpose(0, 2, 1)
            except np.linalg.LinAlgError:
                self._ok = False
                continue
            self._keep(at, xp.ascontiguousarray(rows))
        self._row[targets] = -1


def smoother_name(mesh) -> str:
    """The smoother of a level on ``mesh``: "line Vanka" or "element Vanka" (:func:`smoother_for`)."""
    return LineVanka.name if (mesh.stretches > LINE_STRETCH).any() else Vanka.name


def smoother_for(op, mesh, valence, storage):
    """The smoother of a level (operator ``op`` on ``mesh``, this rank's part): line Vanka
    where an element is more than LINE_STRETCH times longer than thick, else element Vanka."""
    members = element_lines(mesh)
    if members is None:
        return Vanka(op, mesh, valence, storage)
    return LineVanka(op, mesh, valence, storage, members)
