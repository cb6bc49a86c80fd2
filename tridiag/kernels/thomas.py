"""Thomas algorithm: the exact reference, and PTA (one GPU thread per system, pta.cu).

Both do the same arithmetic: forward sweep c'_k = c_k / (b_k - a_k c'_{k-1}),
d'_k = (d_k - a_k d'_{k-1}) / (b_k - a_k c'_{k-1}), then x_k = d'_k - c'_k x_{k+1}.
"""

from __future__ import annotations

import numpy as np

from .build import blocks, kernel

THREADS = 128


def thomas_numpy(a, b, c, d, xp=np):
    """x of the systems (n, S), vectorised over S; inf/NaN where a pivot is zero."""
    n = b.shape[0]
    cp = xp.empty_like(b)
    x = xp.empty_like(d)
    inv = 1 / b[0]
    cp[0] = c[0] * inv
    x[0] = d[0] * inv
    for k in range(1, n):
        inv = 1 / (b[k] - a[k] * cp[k - 1])
        cp[k] = c[k] * inv
        x[k] = (d[k] - a[k] * x[k - 1]) * inv
    for k in range(n - 2, -1, -1):
        x[k] -= cp[k] * x[k + 1]
    return x


def first_zero_pivot(a, b, c):
    """Row of the first exactly zero Thomas pivot of each system (n, S), or -1 (float64)."""
    n, s = b.shape
    first = np.full(s, -1)
    cprev = np.zeros(s)
    for k in range(n):
        piv = b[k] - (a[k] * cprev if k else 0.0)
        first = np.where((first < 0) & (piv == 0), k, first)
        with np.errstate(divide="ignore", invalid="ignore"):
            cprev = c[k] / piv
    return first


def pta_cuda(a, b, c, d, x):
    """Solve the canonical (outer, n, inner) CuPy batch into x, one thread per system."""
    import cupy as cp

    outer, n, inner = a.shape
    nsys = outer * inner
    scratch = cp.empty_like(a)
    kernel("pta.cu", "pta", a.dtype)(
        (blocks(nsys, THREADS),), (THREADS,), (a, b, c, d, scratch, x, np.int32(n), np.int64(inner), np.int64(nsys))
    )
