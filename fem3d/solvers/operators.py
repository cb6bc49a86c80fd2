"""The global operator A = sum_e C_e^T A_e C_e kept as stored element matrices.

A is never assembled: products with A and A^T go element by element through
fem3d.kernels.ebe from the one stored copy of the element matrices: the NumPy reference,
or the CUDA kernel launched colour by colour; a GPU operator of at most ROW_SUMS_ELEMENTS
elements takes A x in one launch for every element's product and one for their sums
instead (fem3d.kernels.ebe.RowSums: the same bits; its memory bounded by the limit). On
several ranks each holds its own elements; a product is completed by summing the
interface entries with the neighbours (fem3d.parallel.partition.Distribution), so every
rank holds A x on all its entries.
Where the communicator asks for it (--overlap) and each colour lists its interface
elements (those touching an unknown shared with another rank) first, as
fem3d.parallel.partition.distribute_owned orders them, a product computes the interface
elements, starts the interface sum, computes the interior elements while the entries
travel, then completes the sum (communication behind computation; the same sums in
another order: equal to round-off). It is off by default: where the messages take a few
µs, the doubled launches cost as much as the messages they hide, and an exchange mostly
waits for the slowest rank (docs/parallel.md, interface sums).
"""

from __future__ import annotations

import numpy as np

from gpucfd.sets import distinct
from ..kernels import ebe
from ..kernels.ebe import LD, NL
from ..parallel.partition import Distribution

ROW_SUMS_ELEMENTS = 65536  # GPU operators of at most this many elements take A x by ebe.RowSums


class ElementOperator:
    """Element-by-element operator on a mesh's unknowns [u | v | w | p].

    mats  (E, NL, LD) element matrices (filled by the caller), colour-major order, stored as
          ``matrix_dtype``: float64, or float32 to halve the bytes each product reads
          (the operator is then the rounded matrix; the CUDA kernel sums in float64, the
          NumPy path each element's products in float32: fem3d.kernels.ebe), or float16
          scaled per row (filled by fem3d.kernels.ebe.quantise) to halve them again
    row_scale  (E, NL) float32 row scales of float16 ``mats`` (ones until filled; the
          operator's element matrices are diag(row_scale_e) mats_e), else None
    dofs  (E, NL) int32 unknown (of this rank's vector) of each local unknown
    dist  fem3d.parallel.partition.Distribution of the n unknowns (default: one process)
    colours  [(e0, e1)] the colours' element ranges; passes: None (blocking products), or
          the (interface, interior) ranges of each colour of an overlapped product
    row_sums  the fem3d.kernels.ebe.RowSums of A x on a GPU up to ROW_SUMS_ELEMENTS elements
          (its plan and a row of products per element; give another operator's
          ``row_sums`` of the same ``dofs`` to share them: products are taken one at a
          time), else None
    """

    def __init__(
        self,
        backend,
        dofs: np.ndarray,
        colour_offsets: np.ndarray,
        n: int,
        dist=None,
        matrix_dtype=np.float64,
        row_sums=None,
    ):
        if n >= 2**31:
            raise ValueError(f"{n} unknowns exceed the int32 index range of the kernels")
        self.backend = backend
        self.xp = backend.xp
        self.n = int(n)
        self.dist = dist or Distribution.serial(backend, n)
        self.dofs = backend.asarray(dofs, dtype=np.int32)
        self.colour_offsets = [int(v) for v in colour_offsets]
        self.colours = ebe.colour_ranges(self.colour_offsets)
        self.mats = self.xp.zeros((dofs.shape[0], NL, LD), dtype=matrix_dtype)
        self.row_scale = self.xp.ones((dofs.shape[0], NL), dtype=np.float32) if self.mats.dtype == np.float16 else None
        self._apply = ebe.for_backend(backend)
        if row_sums is None and backend.is_gpu and self.dofs.shape[0] <= ROW_SUMS_ELEMENTS:
            row_sums = ebe.RowSums(backend, self.dofs, self.n)
        self.row_sums = row_sums
        self._cross = None
        self.passes = self._overlap_passes() if self.dist.comm.overlap else None

    def _overlap_passes(self):
        """(interface ranges, interior ranges), one of each per colour, where every colour
        lists the elements touching a shared unknown first; None on one process, without
        such elements, or where a colour mixes them (the products then stay blocking)."""
        xp, dist = self.xp, self.dist
        if not dist.shared:
            return None
        on = xp.zeros(self.n, dtype=bool)
        on[self.backend.asarray(dist.interface)] = True
        touches = self.backend.to_numpy(on[self.dofs].any(axis=1))
        first, rest = [], []
        for e0, e1 in self.colours:
            k = e0 + int(touches[e0:e1].sum())
            if not touches[e0:k].all():
                return None
            first.append((e0, k))
            rest.append((k, e1))
        return first, rest

    def matvec(self, x, out, add=None):
        """out = A x (+ ``add``, a vector of this rank's local contributions summed over the
        interface with the product's: one interface sum for both)."""
        return self._product(x, out, False, add)

    def rmatvec(self, x, out):
        """out = A^T x."""
        return self._product(x, out, True)

    def _product(self, x, out, transpose: bool, add=None):
        """out = A x or A^T x (+ ``add``), complete on every rank: the interface elements, the
        interface sum started, the interior elements, the sum completed (blocking without
        ``passes``)."""
        operands = (self.mats, self.dofs, x, out)
        if self.passes is None:
            if self.row_sums is not None and not transpose:
                self.row_sums.apply(*operands, self.row_scale)
            else:
                self._apply(*operands, self.colours, transpose, self.row_scale)
            if add is not None:
                out += add
            return self.dist.sum_interface(out)
        interface, interior = self.passes
        self._apply(*operands, interface, transpose, self.row_scale)
        if add is not None:
            out += add
        started = self.dist.begin_sum(out)
        self._apply(*operands, interior, transpose, self.row_scale, accumulate=True)
        return self.dist.end_sum(out, started)

    def normal_matvec(self, x, out, work):
        """out = A^T A x (``work`` holds A x)."""
        self.matvec(x, work)
        return self.rmatvec(work, out)

    def normal_diagonal(self, max_entries: int = 2**25):
        """diag(A^T A)_j = sum_i (A_ij)^2 exactly, with A_ij summed over all elements.

        Entries of the element matrices are grouped by (row, column) and summed before
        squaring; rows are processed in blocks of about ``max_entries`` entries. Entries
        split between ranks add their cross terms, exchanged with the peers. Float64 or
        float32 storage only.
        """
        self._unscaled("normal_diagonal")
        xp = self.xp
        n_elem = self.dofs.shape[0]
        entries_per_row = max(1.0, n_elem * NL * NL / self.n)
        block = max(1, int(max_entries / entries_per_row))
        diag = xp.zeros(self.n, dtype=np.float64)
        for r0 in range(0, self.n, block):
            sel = (self.dofs >= r0) & (self.dofs < r0 + block)
            e, r = xp.nonzero(sel)
            if e.size == 0:
                continue
            vals = self.mats[e, r, :NL].ravel()
            rows = (self.dofs[e, r].astype(np.int64) - r0)[:, None]
            key = (rows * self.n + self.dofs[e].astype(np.int64)).ravel()
            uniq, inv = xp.unique(key, return_inverse=True)
            sums = xp.bincount(inv.ravel(), weights=vals, minlength=uniq.size)
            diag += xp.bincount(uniq % self.n, weights=sums * sums, minlength=self.n)
        diag += self._normal_diagonal_cross_terms()
        return self.dist.sum_interface(diag)

    def _normal_diagonal_cross_terms(self):
        """Terms of diag(A^T A) from entries split between ranks (local vector, before the
        interface sum).

        A global entry A_ij whose row and column both lie on the interface with a peer can
        be a sum of partial sums a_r + a_q held by two ranks; (a_r + a_q)^2 then needs
        2 a_r a_q besides the squares each rank adds. For every such pair the higher rank
        adds 2 a_r a_q at its column j.
        """
        xp, dist = self.xp, self.dist
        out = xp.zeros(self.n, dtype=np.float64)
        if not dist.shared:
            return out
        sums, theirs = self.peer_pair_sums()
        for q, (_, _, cols, m) in self.cross_plan.items():
            if dist.comm.rank > q:
                out += xp.bincount(cols, weights=2.0 * sums[q] * theirs[q], minlength=self.n)
        return out

    def _unscaled(self, name: str) -> None:
        """ValueError for float16 (row-scaled) storage, which ``name`` does not read."""
        if self.row_scale is not None:
            raise ValueError(
                f"ElementOperator.{name} needs float64 or float32 element matrices (these are float16 scaled per row)"
            )

    def peer_pair_sums(self, sources=None):
        """:func:`peer_pair_sums` of this operator's :attr:`cross_plan` (default ``sources``:
        the stored matrices). Collective."""
        if sources is None:
            sources = [(self.mats, self.xp.arange(self.dofs.shape[0], dtype=np.int32))]
        return peer_pair_sums(self.cross_plan, self.dist, sources)

    @property
    def cross_plan(self) -> dict:
        """:func:`cross_plan` of this operator's unknowns (made at the first call)."""
        if self._cross is None:
            self._cross = cross_plan(self.backend, self.dofs, self.n, self.dist)
        return self._cross

    def to_scipy(self):
        """The assembled matrix as scipy.sparse CSR on the host (for tests and small problems)."""
        import scipy.sparse as sp

        mats = self.backend.to_numpy(self.mats).astype(np.float64)
        if self.row_scale is not None:
            mats *= self.backend.to_numpy(self.row_scale)[:, :, None]
        dofs = self.backend.to_numpy(self.dofs).astype(np.int64)
        rows = np.repeat(dofs[:, :, None], NL, axis=2).ravel()
        cols = np.repeat(dofs[:, None, :], NL, axis=1).ravel()
        return sp.csr_matrix((mats.ravel(), (rows, cols)), shape=(self.n, self.n))


def peer_pair_sums(plan: dict, dist, sources):
    """Per peer: this rank's and the peer's partial sums of the entries (pairs) both hold,
    this rank's from the element matrices of ``sources``, pairs (mats (m, NL, LD), row
    (E,) int32: each element's row of mats, -1 for elements not in it) that give every
    element holding such entries once; ``plan``: :func:`cross_plan`. Collective."""
    xp, size = dist.backend.xp, NL * LD
    sums = {q: xp.zeros(m, dtype=np.float64) for q, (_, _, _, m) in plan.items()}
    for mats, row in sources:
        flat = mats.reshape(-1)
        for q, (pos, seg, _, m) in plan.items():
            at = row[pos // size]
            keep = at >= 0
            values = flat[(at.astype(np.int64) * size + pos % size)[keep]]
            sums[q] += xp.bincount(seg[keep], weights=values.astype(np.float64), minlength=m)
    theirs = {q: xp.empty_like(a) for q, a in sums.items()}
    dist.exchange(sums, theirs)
    return sums, theirs


def cross_plan(backend, dofs, n: int, dist) -> dict:
    """{peer: (positions, segments, columns, pairs)} of the elements' unknowns ``dofs`` (E, NL)
    among ``n`` distributed by ``dist``: positions in flattened square element matrices
    (E, NL, LD) of the entries whose row and column are shared with the peer, the pair
    (segment) of each, the local column of each pair and the number of pairs; pairs both
    ranks hold, in one order (empty on one process). Found with the backend's array module
    (on the GPU there), only the keys of the pairs going through the host to the peers."""
    xp = backend.xp
    dofs = dofs.astype(np.int64)
    gdofs = backend.asarray(dist.gdofs)
    keys_of, entries = {}, {}
    for q, idx in dist.shared.items():
        on_q = xp.zeros(n, dtype=bool)
        on_q[backend.asarray(idx)] = True
        mask = on_q[dofs]
        elems = xp.flatnonzero(mask.any(axis=1))
        m = mask[elems]
        e, r, c = xp.nonzero(m[:, :, None] & m[:, None, :])
        e = elems[e]
        key = gdofs[dofs[e, r]] * dist.n_global + gdofs[dofs[e, c]]
        keys_of[q] = distinct(key, xp)
        entries[q] = (e, r, c, key)
    theirs = dist.exchange_objects({q: backend.to_numpy(k) for q, k in keys_of.items()})
    plan = {}
    for q, (e, r, c, key) in entries.items():
        mine = keys_of[q]
        common = mine[_found(xp, backend.asarray(theirs[q]), mine)]
        keep = _found(xp, common, key)
        e, r, c, seg = e[keep], r[keep], c[keep], xp.searchsorted(common, key[keep])
        cols = xp.empty(len(common), dtype=np.int64)
        cols[seg] = dofs[e, c]
        plan[q] = ((e * NL + r) * LD + c, seg, cols, len(common))
    return plan


def _found(xp, keys, values):
    """(len(values),) bool: which of ``values`` the sorted array ``keys`` holds."""
    if not len(keys):
        return xp.zeros(values.shape, dtype=bool)
    return keys[xp.minimum(xp.searchsorted(keys, values), len(keys) - 1)] == values
