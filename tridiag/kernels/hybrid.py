"""The hybrid solver (hybrid.cu): chunk sweeps in registers, PCR on the reduced system.

Chunk j holds rows j*M .. j*M+M-1. With xl = last unknown of chunk j-1 and xr = last
unknown of chunk j, a forward and a backward sweep over rows 0..M-2 give
x_k = D_k - A_k xl - C_k xr. Substituting rows M-2 (own chunk) and 0 (next chunk, F) into
row M-1 leaves one equation per chunk in its last unknown, a tridiagonal system of
J = ceil(n / M) rows, solved by PCR; then every x_k follows. The NumPy reference pads the
last chunk with identity rows (the kernels cut it short instead; same solution).
"""

from __future__ import annotations

import numpy as np

from .build import MAX_SHARED, blocks, kernel, round_warp
from .pcr import pcr_numpy
from .pieces import pieces

CHUNKS = (8, 16, 32)  # rows per thread of the one-block-per-system kernel
GRID_CHUNK = 16  # rows per thread of the reduce/expand kernels
GROUP = 8  # PART_GROUP in hybrid.cu
GRID_THREADS = 256


def _sweeps(a, b, c, d):
    """Relations (D, A, C) of rows 0..M-2 of chunks (J, M, S), after both sweeps."""
    m = b.shape[1]
    D, A, C = (np.empty_like(b[:, : max(m - 1, 0)]) for _ in range(3))
    for k in range(m - 1):
        if k == 0:
            inv = 1 / b[:, 0]
            D[:, 0], A[:, 0], C[:, 0] = d[:, 0] * inv, a[:, 0] * inv, c[:, 0] * inv
        else:
            inv = 1 / (b[:, k] - a[:, k] * C[:, k - 1])
            D[:, k] = (d[:, k] - a[:, k] * D[:, k - 1]) * inv
            A[:, k] = -a[:, k] * A[:, k - 1] * inv
            C[:, k] = c[:, k] * inv
    for k in range(m - 3, -1, -1):
        D[:, k] -= C[:, k] * D[:, k + 1]
        A[:, k] -= C[:, k] * A[:, k + 1]
        C[:, k] = -C[:, k] * C[:, k + 1]
    return D, A, C


def hybrid_numpy(a, b, c, d, chunk: int):
    """x of the systems (n, S) by the hybrid method with chunks of ``chunk`` rows."""
    n, s = b.shape
    a4, b4, c4, d4 = pieces(a, chunk, 0), pieces(b, chunk, 1), pieces(c, chunk, 0), pieces(d, chunk, 0)
    nchunks = a4.shape[0]
    D, A, C = _sweeps(a4, b4, c4, d4)
    if chunk >= 2:
        first = (D[:, 0], A[:, 0], C[:, 0])
        prev = (D[:, -1], A[:, -1], C[:, -1])
    else:
        zero = np.zeros((nchunks, s), b.dtype)
        first = (zero, zero, -np.ones_like(zero))
        prev = (zero, -np.ones_like(zero), zero)
    fd, fa, fc = (np.concatenate([f[1:], np.zeros_like(f[:1])]) for f in first)
    la, lb, lc, ld = a4[:, -1], b4[:, -1], c4[:, -1], d4[:, -1]
    ra = -la * prev[1]
    rb = lb - la * prev[2] - lc * fa
    rc = -lc * fc
    rd = ld - la * prev[0] - lc * fd
    xr = pcr_numpy(ra, rb, rc, rd)
    xl = np.concatenate([np.zeros_like(xr[:1]), xr[:-1]])
    x = np.empty_like(d4)
    x[:, :-1] = D - A * xl[:, None] - C * xr[:, None]
    x[:, -1] = xr
    return x.reshape(nchunks * chunk, s)[:n]


def onchip_shared(chunk: int, nt: int, dtype) -> int:
    """Shared bytes of hybrid_onchip for ``nt`` threads: per-warp staging + 8 rows per thread."""
    return (nt // 32 * 4 * 32 * (GROUP + 1) + 8 * nt) * np.dtype(dtype).itemsize


def onchip_max_threads(chunk: int, dtype) -> int:
    """__launch_bounds__ of hybrid_onchip<chunk> (hybrid.cu)."""
    return 256 if chunk == 32 and np.dtype(dtype) == np.float64 else 512


def onchip_fits(n: int, chunk: int, dtype) -> bool:
    nt = round_warp(-(-n // chunk))
    return nt <= onchip_max_threads(chunk, dtype) and onchip_shared(chunk, nt, dtype) <= MAX_SHARED


def default_chunk(n: int, dtype):
    """Chunk of the one-block-per-system kernel for n rows, or None if no block holds n."""
    for chunk in (32, 16, 8) if np.dtype(dtype) == np.float64 else (16, 32, 8):  # fastest first (docs/performance.md)
        if onchip_fits(n, chunk, dtype):
            return chunk
    return None


def hybrid_cuda(a, b, c, d, x, chunk=None):
    """Solve the canonical (outer, n, inner) CuPy batch into x.

    One block per system when the systems are contiguous (inner == 1) and one block holds
    n rows; otherwise reduce / solve the reduced systems recursively / expand.
    """
    outer, n, inner = a.shape
    if chunk is None:
        chunk = default_chunk(n, a.dtype) if inner == 1 else None
    if chunk is not None and chunk in CHUNKS and onchip_fits(n, chunk, a.dtype):
        nt = round_warp(-(-n // chunk))
        shared = onchip_shared(chunk, nt, a.dtype)
        kernel("hybrid.cu", f"hybrid_onchip{chunk}", a.dtype, shared)(
            (outer * inner,), (nt,), (a, b, c, d, x, np.int32(n), np.int64(inner)), shared_mem=shared
        )
        return
    import cupy as cp

    chunk = chunk if chunk in (8, GRID_CHUNK) else GRID_CHUNK
    nchunks = -(-n // chunk)
    total = outer * nchunks * inner
    red = cp.empty((7, outer, nchunks, inner), dtype=a.dtype)
    args = (np.int32(n), np.int64(inner), np.int32(nchunks), np.int64(total))
    grid = (blocks(total, GRID_THREADS),), (GRID_THREADS,)
    kernel("hybrid.cu", f"hybrid_reduce{chunk}", a.dtype)(*grid, (a, b, c, d, red, *args))
    fd, fa, fc, ra, rb, rd, lc = red
    nxt = (slice(None), slice(1, None))
    rb[:, :-1] -= lc[:, :-1] * fa[nxt]
    rc = cp.zeros_like(ra)
    rc[:, :-1] = -lc[:, :-1] * fc[nxt]
    rd[:, :-1] -= lc[:, :-1] * fd[nxt]
    if nchunks == 1:
        x_reduced = rd / rb  # the reduced system's solution, one unknown per chunk
    else:
        x_reduced = cp.empty_like(ra)
        hybrid_cuda(ra, rb, rc, rd, x_reduced)
    kernel("hybrid.cu", f"hybrid_expand{chunk}", a.dtype)(*grid, (a, b, c, d, x_reduced, x, *args))
