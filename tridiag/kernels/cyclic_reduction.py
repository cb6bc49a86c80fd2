"""Cyclic reduction for any n (cyclic_reduction.cu); rows past the end are identity rows.

Level 0 is the system; level l + 1 keeps the odd rows (1, 3, 5, ...) of level l, each
having eliminated its even neighbours (pcr.reduce_rows), so level l has floor(n / 2^l)
rows; at one row x = d / b. Back substitution solves the even rows of each level from the
odd ones above. ``cr`` keeps rows in place (level l = every 2^l-th row, strided access);
``cr_sorted`` writes each level contiguously (Esfahanian et al.'s step-by-step
reordering). Both do this arithmetic; this reference is shared by both.
"""

from __future__ import annotations

import numpy as np

from .build import kernel
from .pcr import reduce_rows

THREADS = 256  # CR_THREADS in cyclic_reduction.cu


def _row_or_identity(row, idx, n):
    """Rows ``idx`` of level ``row`` (tuple of (n, S) arrays); indices >= n give identity rows."""
    ok = idx < n
    safe = np.where(ok, idx, 0)
    return tuple(np.where(ok[:, None], v[safe], f) for v, f in zip(row, (0.0, 1.0, 0.0, 0.0)))


def cr_numpy(a, b, c, d):
    """x of the systems (n, S) by cyclic reduction."""
    levels = [(a, b, c, d)]
    while levels[-1][1].shape[0] > 1:
        row = levels[-1]
        n = row[1].shape[0]
        j = np.arange(n // 2)
        levels.append(
            reduce_rows(
                _row_or_identity(row, 2 * j, n),
                _row_or_identity(row, 2 * j + 1, n),
                _row_or_identity(row, 2 * j + 2, n),
            )
        )
    x = levels[-1][3] / levels[-1][1]
    for a_, b_, c_, d_ in reversed(levels[:-1]):
        n = b_.shape[0]
        up = np.concatenate([np.zeros_like(x[:1]), x, np.zeros_like(x[:1])])  # x of odd rows, padded
        xn = np.empty_like(d_)
        xn[1::2] = x
        j = np.arange(0, n, 2)
        xl, xr = up[j // 2], up[j // 2 + 1]
        xr = np.where((j // 2 < x.shape[0])[:, None], xr, 0)
        xn[0::2] = (d_[0::2] - a_[0::2] * xl - c_[0::2] * xr) / b_[0::2]
        x = xn
    return x


def cr_cuda(a, b, c, d, x, sorted_levels: bool):
    """Solve the canonical (outer, n, inner) CuPy batch into x (one block per system)."""
    import cupy as cp

    outer, n, inner = a.shape
    nsys = outer * inner
    args = (np.int32(n), np.int64(inner))
    if sorted_levels:
        work = [cp.empty((nsys, n), dtype=a.dtype) for _ in range(5)]
        kernel("cyclic_reduction.cu", "cr_sorted", a.dtype)((nsys,), (THREADS,), (a, b, c, d, *work, x, *args))
    else:
        work = [cp.empty((nsys, max(1, n // 2)), dtype=a.dtype) for _ in range(4)]
        kernel("cyclic_reduction.cu", "cr_inplace", a.dtype)((nsys,), (THREADS,), (a, b, c, d, *work, x, *args))
