"""Checkerboard Thomas (checkerboard.cu), an iterative solver.

Each system is cut into nop = ceil(n / dop) pieces of dop rows. One iteration solves the
even pieces (0, 2, ...) by Thomas, with the couplings to the neighbouring pieces moved
to the right-hand side at their current values, then the odd pieces with the fresh
values. A system stops when max|x_new - x_old| <= tol * max|x_new| over an iteration
(converged), when that update is not finite (diverged) or after maxiter iterations.
Returns x and the iterations per system, negated where the system did not converge.
"""

from __future__ import annotations

import numpy as np

from .build import kernel
from .pieces import pieces

MEMORIES = ("shared", "global")
THREADS = 128  # CB_THREADS in checkerboard.cu
MAX_SHARED_DOP = 32  # CB_MAX_DOP


def _piece_thomas(a, b, c, d, xl, xr):
    """Thomas on pieces (P, dop, S) with x outside the piece fixed at xl (above), xr (below)."""
    dop = b.shape[1]
    d = d.copy()
    d[:, 0] -= a[:, 0] * xl
    d[:, -1] -= c[:, -1] * xr
    cp = np.empty_like(b)
    dp = np.empty_like(d)
    for k in range(dop):
        ak = a[:, k] if k else 0
        ck = c[:, k] if k < dop - 1 else 0
        inv = 1 / (b[:, k] - ak * (cp[:, k - 1] if k else 0))
        cp[:, k] = ck * inv
        dp[:, k] = (d[:, k] - ak * (dp[:, k - 1] if k else 0)) * inv
    x = np.empty_like(d)
    x[:, -1] = dp[:, -1]
    for k in range(dop - 2, -1, -1):
        x[:, k] = dp[:, k] - cp[:, k] * x[:, k + 1]
    return x


def checkerboard_numpy(a, b, c, d, dop: int, tol: float, maxiter: int, x0=None):
    """(x, iterations) of the systems (n, S)."""
    n, s = b.shape
    a3, b3, c3, d3 = pieces(a, dop, 0), pieces(b, dop, 1), pieces(c, dop, 0), pieces(d, dop, 0)
    x = pieces(np.zeros_like(d) if x0 is None else x0.astype(d.dtype), dop, 0)
    nop = x.shape[0]
    active = np.ones(s, bool)
    iters = np.zeros(s, int)
    converged = np.zeros(s, bool)
    zero = np.zeros((1, s), d.dtype)
    with np.errstate(all="ignore"):
        for _ in range(maxiter):
            du = np.zeros(s, d.dtype)
            for colour in (0, 1):
                p = slice(colour, None, 2)
                xl = np.concatenate([zero, x[:-1, -1]])[p]
                xr = np.concatenate([x[1:, 0], zero])[p]
                new = _piece_thomas(a3[p], b3[p], c3[p], d3[p], xl, xr)
                change = np.abs(new - x[p]).max(axis=(0, 1), initial=0)
                du = np.where(np.isnan(change) | (change > du), change, du)
                x[p] = np.where(active, new, x[p])
            xmax = np.abs(x).max(axis=(0, 1))
            iters += active
            done = active & (du <= tol * xmax)
            converged |= done
            active &= ~done & np.isfinite(du)
            if not active.any():
                break
    return x.reshape(nop * dop, s)[:n], np.where(converged, iters, -iters)


def checkerboard_cuda(a, b, c, d, x, dop: int, tol: float, maxiter: int, memory: str = "shared"):
    """Iterate on the canonical (outer, n, inner) CuPy batch; x holds the initial guess.

    Returns the iterations per system (CuPy int32), negated where not converged.
    """
    import cupy as cp

    outer, n, inner = a.shape
    nsys = outer * inner
    iters = cp.empty(nsys, dtype=np.int32)
    scratch = (a, a) if memory == "shared" else (cp.empty_like(a), cp.empty_like(a))
    shared = (2 + (2 * dop if memory == "shared" else 0)) * THREADS * a.itemsize
    kernel("checkerboard.cu", f"checkerboard_{memory}", a.dtype, shared)(
        (nsys,),
        (THREADS,),
        (
            a,
            b,
            c,
            d,
            x,
            *scratch,
            iters,
            np.int32(n),
            np.int64(inner),
            np.int32(dop),
            a.dtype.type(tol),
            np.int32(maxiter),
        ),
        shared_mem=shared,
    )
    return iters
