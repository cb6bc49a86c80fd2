"""Element Vanka smoothing for the saddle-point systems on Q2-Q1 boxes.

For every element e, the block B_e = R_e A R_e^T of the ASSEMBLED matrix A restricted to
the element's 89 unknowns (27 u, 27 v, 27 w, 8 p; velocity and pressure solved together)
is inverted once per linearisation; one smoothing application is the additive sum

    z = sum_e R_e^T W_e B_e^-1 R_e r,        W_e = diag(1 / valence)

(valence: elements sharing an unknown, so the weights form a partition of unity). That
is an element-by-element product with stored matrices W_e B_e^-1, so the fem3d.kernels.ebe
products (NumPy reference and CUDA kernel) apply it. The blocks (summed in float64) are
inverted and stored in the precision of the level's matrices (float32 in
fem3d.multigrid): a smoother needs no more, and it halves the bytes each application
reads (on the GPU also a third of the inversion time).

B_e needs the contributions of the element's neighbours: on a structured box the unknowns
that element e shares with its neighbour at offset o in {-1, 0, 1}^3 sit at the same
local positions for every e, so B_e is A_e plus 26 gathers from the neighbours
(fem3d.kernels.vanka: NumPy reference and CUDA kernel). Entries whose row and column are
shared with another rank get that rank's partial sums
(fem3d.operators.ElementOperator.peer_entries).
"""
from __future__ import annotations

import itertools

import numpy as np

from .element import Q1, Q2
from .kernels import vanka as vanka_kernels
from .kernels.ebe import NL
from .kernels.vanka import OFFSETS
from .operators import ElementOperator

CHUNK = {"gpu": 8192, "cpu": 128}  # elements per batch of blocks (bounds the temporaries; on the CPU, temporaries
# of a few MB stay in the heap, while fresh pages of larger ones cost more than the arithmetic)


def shared_positions(offset) -> tuple[np.ndarray, np.ndarray]:
    """Local positions (ia, ja) of the unknowns an element shares with its neighbour at
    grid offset (dx, dy, dz): unknown ia[k] of the element is unknown ja[k] of the neighbour."""
    offset = np.asarray(offset)
    ia, ja = [], []
    for element, first, step in ((Q2, 0, 27), (Q1, 81, 8)):
        ijk = element.node_indices
        last = element.degree
        other = ijk - last * offset
        ok = np.all((other >= 0) & (other <= last), axis=1)
        m = last + 1
        mine = np.flatnonzero(ok)
        theirs = other[ok, 0] + m * other[ok, 1] + m * m * other[ok, 2]
        for comp in range(3 if element is Q2 else 1):
            ia.append(first + comp * step + mine)
            ja.append(first + comp * step + theirs)
    return np.concatenate(ia), np.concatenate(ja)


def offsets() -> list:
    """The grid offsets (dx, dy, dz) in {-1, 0, 1}^3 other than (0, 0, 0), in kernel order."""
    return [o for o in itertools.product((-1, 0, 1), repeat=3) if o != (0, 0, 0)]


def shared_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ia, ja, starts): :func:`shared_positions` of every offset concatenated, offset o
    at ia[starts[o]:starts[o + 1]] (fem3d.kernels.vanka), int32."""
    pairs = [shared_positions(o) for o in offsets()]
    starts = np.cumsum([0] + [len(ia) for ia, _ in pairs])
    return (np.concatenate([ia for ia, _ in pairs]).astype(np.int32), np.concatenate([ja for _, ja in pairs]).astype(np.int32),
            starts.astype(np.int32))


def element_neighbours(mesh) -> np.ndarray:
    """(E, OFFSETS) int32 host array: the local neighbour of each local element at each
    grid offset (:func:`offsets`) on this rank's part of the box ``mesh.grid``, -1 where
    there is none. Checked against the unknown numbering of the mesh."""
    nx, ny, nz = mesh.grid
    ids = mesh.element_ids
    local = np.full(nx * ny * nz, -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    i, j, k = ids % nx, (ids // nx) % ny, ids // (nx * ny)
    dofs = mesh.dofs()
    ia, ja, starts = shared_table()
    out = np.full((len(ids), OFFSETS), -1, dtype=np.int32)
    for o, (dx, dy, dz) in enumerate(offsets()):
        a, b, c = i + dx, j + dy, k + dz
        inside = (a >= 0) & (a < nx) & (b >= 0) & (b < ny) & (c >= 0) & (c < nz)
        elems = np.flatnonzero(inside)
        nbr = local[(a + nx * (b + ny * c))[elems]]
        elems, nbr = elems[nbr >= 0], nbr[nbr >= 0]
        mine, theirs = ia[starts[o]:starts[o + 1]], ja[starts[o]:starts[o + 1]]
        node = (mine < 27) | (mine >= 81)  # u and p positions: v and w follow u in every numbering of fem3d.mesh
        if not np.array_equal(dofs[elems[:, None], mine[node]], dofs[nbr[:, None], theirs[node]]):
            raise ValueError("the mesh's unknowns are not numbered as a structured box")
        out[elems, o] = nbr
    return out


class Vanka:
    """The element Vanka smoother of one level: ``setup()`` after the level's element
    matrices changed, then ``apply(r, out)``: out = sum_e R_e^T W_e B_e^-1 R_e r (complete
    on every rank). ``op`` the level's ElementOperator, ``mesh`` its (part of the) box,
    ``valence`` (n,) elements sharing each unknown, all ranks'."""

    def __init__(self, op: ElementOperator, mesh, valence):
        self.op = op
        xp, backend = op.xp, op.backend
        self.neighbours = backend.asarray(element_neighbours(mesh))
        self.ia, self.ja, self.starts = (backend.asarray(a) for a in shared_table())
        self._blocks, self._invert = vanka_kernels.for_backend(backend), vanka_kernels.inverse_for_backend(backend)
        self.weights = 1.0 / valence
        self.inverses = ElementOperator(backend, backend.to_numpy(op.dofs), op.colour_offsets, op.n, op.dist, op.mats.dtype)
        self.xp = xp

    def blocks(self, first: int, last: int, peers: list):
        """(last - first, NL, NL) float64 assembled blocks of elements first:last;
        ``peers``: ElementOperator.peer_entries()."""
        out = self.xp.empty((last - first, NL, NL), dtype=np.float64)
        self._blocks(self.op.mats, self.neighbours, self.ia, self.ja, self.starts, out, first, last)
        flat_out = out.reshape(-1)
        lo, hi = first * NL * NL, last * NL * NL
        for pos, values in peers:
            keep = (pos >= lo) & (pos < hi)
            flat_out[pos[keep] - lo] += values[keep]
        return out

    def setup(self) -> bool:
        """Assemble, invert and weight the blocks; False when a block is singular (the
        smoother, and so the preconditioner, is then undefined)."""
        xp, storage = self.xp, self.inverses.mats.dtype  # inverted in the precision they are stored in
        dofs, n_elem = self.op.dofs, self.op.dofs.shape[0]
        peers = self.op.peer_entries()
        chunk = CHUNK[self.op.backend.kind]
        for first in range(0, n_elem, chunk):
            last = min(first + chunk, n_elem)
            try:
                inv = self._invert(self.blocks(first, last, peers).astype(storage, copy=False))
            except np.linalg.LinAlgError:
                return False
            inv *= self.weights[dofs[first:last]][:, :, None]
            self.inverses.mats[first:last] = inv
        return bool(xp.isfinite(self.inverses.mats).all())  # one read-back, after every chunk

    def apply(self, r, out):
        return self.inverses.matvec(r, out)
