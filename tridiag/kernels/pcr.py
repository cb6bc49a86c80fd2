"""Parallel cyclic reduction for any n (pcr.cu): rows outside the system are identity rows.

Step with stride s, for every row i at once (lo = row i-s, hi = row i+s):
  k1 = a_i / b_lo, k2 = c_i / b_hi,
  a_i <- -a_lo k1,  b_i <- b_i - c_lo k1 - a_hi k2,  c_i <- -c_hi k2,  d_i <- d_i - d_lo k1 - d_hi k2;
after ceil(log2 n) steps (s = 1, 2, 4, ...) every row is decoupled and x = d / b.

Thread mappings (Wei et al. 2013): "block" (one block per system, the system in shared
memory; n <= 4096) and "grid" (several blocks per system, one launch per step). ``arrays``
= 5 stages the solution in a fifth shared array before writing it, 4 writes it directly.
"""

from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError

from .build import MAX_SHARED, blocks, kernel, round_warp

MAPPINGS = ("auto", "block", "grid")
BLOCK_MAX_N = 4096  # PCR_BLOCK_THREADS * PCR_ROWS_PER_THREAD in pcr.cu
GRID_THREADS = 256


def shifted(x, s, fill):
    """Rows (n, S) moved by s (x[i - s] at i; s < 0 moves up), rows from outside = fill."""
    out = np.full_like(x, fill)
    n = x.shape[0]
    if s >= 0:
        out[s:] = x[: n - s] if s < n else out[s:]
    else:
        out[: n + s] = x[-s:] if -s < n else out[: n + s]
    return out


def reduce_rows(lo, row, hi):
    """One elimination: ``row`` = (a, b, c, d) takes in its neighbour rows ``lo`` and ``hi``."""
    a, b, c, d = row
    k1 = a / lo[1]
    k2 = c / hi[1]
    return -lo[0] * k1, b - lo[2] * k1 - hi[0] * k2, -hi[2] * k2, d - lo[3] * k1 - hi[3] * k2


def pcr_numpy(a, b, c, d):
    """x of the systems (n, S) by PCR."""
    row = (a, b, c, d)
    s = 1
    while s < b.shape[0]:
        lo = tuple(shifted(v, s, f) for v, f in zip(row, (0, 1, 0, 0)))
        hi = tuple(shifted(v, -s, f) for v, f in zip(row, (0, 1, 0, 0)))
        row = reduce_rows(lo, row, hi)
        s *= 2
    return row[3] / row[1]


def block_fits(n: int, dtype, arrays: int) -> bool:
    return n <= BLOCK_MAX_N and arrays * n * np.dtype(dtype).itemsize <= MAX_SHARED


def pcr_cuda(a, b, c, d, x, mapping="auto", arrays=4):
    """Solve the canonical (outer, n, inner) CuPy batch into x."""
    outer, n, inner = a.shape
    if mapping == "auto":
        mapping = "block" if block_fits(n, a.dtype, arrays) else "grid"
    if mapping == "block":
        if not block_fits(n, a.dtype, arrays):
            raise InputError(
                f"mapping='block' holds n <= {BLOCK_MAX_N} rows within {MAX_SHARED} bytes "
                f"of shared memory (got n={n}, {a.dtype}); use mapping='grid' or 'auto'"
            )
        shared = arrays * n * a.itemsize
        fn = kernel("pcr.cu", f"pcr_block{arrays}", a.dtype, shared)
        fn(
            (outer * inner,),
            (min(512, round_warp(n)),),
            (a, b, c, d, x, np.int32(n), np.int64(inner)),
            shared_mem=shared,
        )
        return
    import cupy as cp

    total = a.size
    shared = arrays * GRID_THREADS * a.itemsize
    steps = []
    s = 1
    while s < n or not steps:
        steps.append(s)
        s *= 2
    cur = (a, b, c, d)
    bufs = [tuple(cp.empty_like(a) for _ in range(4)) for _ in range(2 if len(steps) > 2 else len(steps) - 1)]
    for k, st in enumerate(steps):
        last = k == len(steps) - 1
        nxt = bufs[k % 2] if not last else (x, x, x, x)
        name = f"pcr_last{arrays}" if last else "pcr_step"
        kernel("pcr.cu", name, a.dtype, shared)(
            (blocks(total, GRID_THREADS),),
            (GRID_THREADS,),
            (*cur, *nxt, x, np.int32(n), np.int64(inner), np.int64(total), np.int32(st)),
            shared_mem=shared,
        )
        cur = nxt
