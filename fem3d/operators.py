"""The global operator A = sum_e C_e^T A_e C_e kept as stored element matrices.

A is never assembled: products with A and A^T go element by element through
fem3d.kernels.ebe (NumPy reference or CUDA kernel, one launch per colour) from the
one stored copy of the element matrices. On several ranks each holds its own
elements; a product is completed by summing the interface entries with the
neighbours (fem3d.partition.Distribution), so every rank holds A x on all its entries.
"""
from __future__ import annotations

import numpy as np

from .kernels import ebe
from .kernels.ebe import LD, NL
from .partition import Distribution


class ElementOperator:
    """Element-by-element operator on a mesh's unknowns [u | v | w | p].

    mats  (E, NL, LD) element matrices (filled by the caller), colour-major order, stored as
          ``matrix_dtype``: float64, or float32 to halve the bytes each product reads
          (products and sums stay float64; the operator is then the rounded matrix)
    dofs  (E, NL) int32 unknown (of this rank's vector) of each local unknown
    dist  fem3d.partition.Distribution of the n unknowns (default: one process)
    """

    def __init__(self, backend, dofs: np.ndarray, colour_offsets: np.ndarray, n: int, dist=None, matrix_dtype=np.float64):
        if n >= 2**31:
            raise ValueError(f"{n} unknowns exceed the int32 index range of the kernels")
        self.backend = backend
        self.xp = backend.xp
        self.n = int(n)
        self.dist = dist or Distribution.serial(backend, n)
        self.dofs = backend.asarray(dofs, dtype=np.int32)
        self.colour_offsets = [int(v) for v in colour_offsets]
        self.mats = self.xp.zeros((dofs.shape[0], NL, LD), dtype=matrix_dtype)
        self._apply = ebe.for_backend(backend)

    def matvec(self, x, out):
        """out = A x."""
        self._apply(self.mats, self.dofs, x, out, self.colour_offsets, False)
        return self.dist.sum_interface(out)

    def rmatvec(self, x, out):
        """out = A^T x."""
        self._apply(self.mats, self.dofs, x, out, self.colour_offsets, True)
        return self.dist.sum_interface(out)

    def normal_matvec(self, x, out, work):
        """out = A^T A x (``work`` holds A x)."""
        self.matvec(x, work)
        return self.rmatvec(work, out)

    def normal_diagonal(self, max_entries: int = 2**25):
        """diag(A^T A)_j = sum_i (A_ij)^2 exactly, with A_ij summed over all elements.

        Entries of the element matrices are grouped by (row, column) and summed before
        squaring; rows are processed in blocks of about ``max_entries`` entries. Entries
        split between ranks add their cross terms (Distribution.normal_diagonal_cross_terms).
        """
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
        diag += self.dist.normal_diagonal_cross_terms(self.mats, self.dofs)
        return self.dist.sum_interface(diag)

    def to_scipy(self):
        """The assembled matrix as scipy.sparse CSR on the host (for tests and small problems)."""
        import scipy.sparse as sp

        mats = self.backend.to_numpy(self.mats)[:, :, :NL].astype(np.float64)
        dofs = self.backend.to_numpy(self.dofs).astype(np.int64)
        rows = np.repeat(dofs[:, :, None], NL, axis=2).ravel()
        cols = np.repeat(dofs[:, None, :], NL, axis=1).ravel()
        return sp.csr_matrix((mats.ravel(), (rows, cols)), shape=(self.n, self.n))
