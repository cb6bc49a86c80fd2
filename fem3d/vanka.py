"""Element Vanka smoothing for the saddle-point systems on Q2-Q1 boxes.

For every element e, the block B_e = R_e A R_e^T of the ASSEMBLED matrix A restricted to
the element's 89 unknowns (27 u, 27 v, 27 w, 8 p; velocity and pressure solved together)
is inverted once per linearisation; one smoothing application is the additive sum

    z = sum_e R_e^T W_e B_e^-1 R_e r,        W_e = diag(1 / valence)

(valence: elements sharing an unknown, so the weights form a partition of unity). That
is an element-by-element product with stored matrices W_e B_e^-1, so the fem3d.kernels.ebe
products (NumPy reference and CUDA kernel) apply it; the inverses are stored in float32
(a smoother needs no more, and it halves the bytes each application reads).

B_e needs the contributions of the element's neighbours: on a structured box the unknowns
that element e shares with its neighbour at offset o in {-1, 0, 1}^3 sit at the same
local positions for every e, so B_e is A_e plus 26 batched gathers. Entries whose row and
column are shared with another rank get that rank's partial sums
(fem3d.operators.ElementOperator.peer_entries).
"""
from __future__ import annotations

import itertools

import numpy as np

from .element import Q1, Q2
from .kernels.ebe import NL
from .operators import ElementOperator

CHUNK = 8192  # elements per batch of blocks (bounds the temporaries)


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


def element_neighbours(mesh) -> list:
    """[(elements, neighbours, ia, ja)] for each of the 26 grid offsets, host arrays: local
    element indices, their local neighbours at that offset (on this rank's part of the box
    ``mesh.grid``) and the shared positions (:func:`shared_positions`). Checked against the
    unknown numbering of the mesh."""
    nx, ny, nz = mesh.grid
    ids = mesh.element_ids
    local = np.full(nx * ny * nz, -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    i, j, k = ids % nx, (ids // nx) % ny, ids // (nx * ny)
    dofs = mesh.dofs()
    out = []
    for offset in itertools.product((-1, 0, 1), repeat=3):
        if offset == (0, 0, 0):
            continue
        dx, dy, dz = offset
        a, b, c = i + dx, j + dy, k + dz
        inside = (a >= 0) & (a < nx) & (b >= 0) & (b < ny) & (c >= 0) & (c < nz)
        nbr = np.full(len(ids), -1, dtype=np.int64)
        nbr[inside] = local[(a + nx * (b + ny * c))[inside]]
        elems = np.flatnonzero(nbr >= 0)
        if elems.size == 0:
            continue
        ia, ja = shared_positions(offset)
        if not np.array_equal(dofs[elems][:, ia], dofs[nbr[elems]][:, ja]):
            raise ValueError("the mesh's unknowns are not numbered as a structured box")
        out.append((elems, nbr[elems], ia, ja))
    return out


class Vanka:
    """The element Vanka smoother of one level: ``setup()`` after the level's element
    matrices changed, then ``apply(r, out)``: out = sum_e R_e^T W_e B_e^-1 R_e r (complete
    on every rank). ``op`` the level's ElementOperator, ``mesh`` its (part of the) box,
    ``valence`` (n,) elements sharing each unknown, all ranks'."""

    def __init__(self, op: ElementOperator, mesh, valence):
        self.op = op
        xp = op.xp
        pairs = element_neighbours(mesh)
        self.pairs = [tuple(op.backend.asarray(a) for a in p) for p in pairs]
        self.bounds = [elems for elems, _, _, _ in pairs]  # host copies: chunk bounds without reading the device
        self.weights = 1.0 / valence
        storage = np.float32 if op.backend.is_gpu else np.float64  # GPU: half the bytes; NumPy would convert at every product
        self.inverses = ElementOperator(op.backend, op.backend.to_numpy(op.dofs), op.colour_offsets, op.n, op.dist, storage)
        self.xp = xp

    def blocks(self, first: int, last: int, peers: list):
        """(last - first, NL, NL) float64 assembled blocks of elements first:last;
        ``peers``: ElementOperator.peer_entries()."""
        A = self.op.mats
        out = A[first:last, :, :NL].astype(np.float64)
        flat_out, flat_a = out.reshape(-1), A.reshape(-1)
        ld = A.shape[2]
        for (elems, nbrs, ia, ja), host in zip(self.pairs, self.bounds):
            lo, hi = np.searchsorted(host, [first, last])
            if hi == lo:
                continue
            e, nb = elems[lo:hi] - first, nbrs[lo:hi]
            to = (e[:, None] * NL * NL + (ia[:, None] * NL + ia[None, :]).ravel()[None, :]).ravel()
            frm = (nb[:, None] * NL * ld + (ja[:, None] * ld + ja[None, :]).ravel()[None, :]).ravel()
            flat_out[to] += flat_a[frm]
        lo, hi = first * NL * NL, last * NL * NL
        for pos, values in peers:
            keep = (pos >= lo) & (pos < hi)
            flat_out[pos[keep] - lo] += values[keep]
        return out

    def setup(self) -> bool:
        """Assemble, invert and weight the blocks; False when a block is singular (the
        smoother, and so the preconditioner, is then undefined)."""
        xp = self.xp
        dofs, n_elem = self.op.dofs, self.op.dofs.shape[0]
        peers = self.op.peer_entries()
        for first in range(0, n_elem, CHUNK):
            last = min(first + CHUNK, n_elem)
            try:
                inv = xp.linalg.inv(self.blocks(first, last, peers))
            except np.linalg.LinAlgError:
                return False
            inv *= self.weights[dofs[first:last]][:, :, None]
            self.inverses.mats[first:last] = inv
        return bool(xp.isfinite(self.inverses.mats).all())  # one read-back, after every chunk

    def apply(self, r, out):
        return self.inverses.matvec(r, out)
