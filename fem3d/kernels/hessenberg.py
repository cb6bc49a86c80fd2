"""The least-squares problem of a fixed number m of GMRES steps (fem3d.solvers.krylov.gmres_steps):
minimise ||beta e1 - H y|| over y (m,) for the (m + 1, m) upper Hessenberg matrix H of the
Arnoldi process, solved where H lives (hessenberg.cu on a GPU: smoothing reads nothing back).

H is passed as (m + 1, m + 1) float64 with beta = H[0, m]. Rules, the same in both versions:
beta = 0 gives y = 0, a non-finite beta gives y = NaN; columns are scanned in order, a
non-finite entry among H[:j + 2, j] gives y = NaN, and the first column with
H[j + 1, j] <= 1e-14 beta (the Krylov space is exhausted) is the last one used (the
coefficients after it are 0). The problem is solved by Givens rotations; a zero pivot of
the triangular factor leaves its coefficient 0. m <= M_MAX.
"""

from __future__ import annotations

import math

import numpy as np

from gpucfd.backend import cuda_module

M_MAX = 32  # the CUDA kernel's fixed local arrays


def lstsq_numpy(H):
    """y (m,) for H (m + 1, m + 1) (NumPy)."""
    m = H.shape[0] - 1
    beta = H[0, m]
    y = np.zeros(m)
    if not beta > 0:
        return y if beta == 0 else y + math.nan
    k = m
    for j in range(m):
        if not np.all(np.isfinite(H[: j + 2, j])):
            return y + math.nan
        if H[j + 1, j] <= 1e-14 * beta:
            k = j + 1
            break
    r = H[: k + 1, :k].copy()
    g = np.zeros(k + 1)
    g[0] = beta
    for j in range(k):
        a, b = r[j, j], r[j + 1, j]
        d = math.hypot(a, b)
        c, s = (a / d, b / d) if d > 0 else (1.0, 0.0)
        r[j : j + 2, j:] = np.array([[c, s], [-s, c]]) @ r[j : j + 2, j:]
        g[j], g[j + 1] = c * g[j], -s * g[j]
    for i in range(k - 1, -1, -1):
        v = g[i] - r[i, i + 1 : k] @ y[i + 1 : k]
        y[i] = v / r[i, i] if r[i, i] != 0 else 0.0
    return y


def lstsq_cuda(H):
    """y (m,) for H (m + 1, m + 1) on the device (CuPy): one thread, no read-back."""
    import cupy

    m = H.shape[0] - 1
    if m > M_MAX:
        raise ValueError(f"at most {M_MAX} GMRES steps on the device (got {m})")
    y = cupy.empty(m, dtype=np.float64)
    cuda_module("fem3d.kernels", "hessenberg.cu").get_function("hessenberg_lstsq")((1,), (1,), (H, y, np.int32(m)))
    return y


def for_backend(backend):
    """The implementation for ``backend``."""
    return lstsq_cuda if backend.is_gpu else lstsq_numpy
