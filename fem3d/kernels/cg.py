"""Fused vector kernels of the normal-equations Jacobi PCG (Chronopoulos-Gear form).

Scalars stay on the device in ``sc`` (9 float64):
  0 gamma = (r, z)   1 delta = (s, z)   2 rr = (r, r)   3 gamma_prev   4 alpha_prev
  5 alpha            6 beta             7 1 before the first iteration  8 breakdown flag
``dots`` reduces the products weighted by ``w`` (1 at owned entries), sums them over
the ranks with ``allreduce`` (None: one process) and derives alpha, beta; ``update``
then advances all vectors in one pass, or leaves them as they are once the breakdown
flag is set (the solver restarts from the true residual at its next check).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module

N_SCALARS = 9
_THREADS = 256  # must match THREADS in cg.cu
_MAX_BLOCKS = 2048


def new_scalars(xp):
    sc = xp.zeros(N_SCALARS, dtype=np.float64)
    sc[7] = 1.0
    return sc


def _scalars(sc):
    """alpha, beta from gamma, delta (mirrors cg_dots_finish in cg.cu)."""
    gamma, delta = sc[0], sc[1]
    beta, denom = 0.0, delta
    with np.errstate(divide="ignore", invalid="ignore"):
        if sc[7] == 0.0:
            beta = gamma / sc[3]
            denom = delta - beta * gamma / sc[4]
        alpha = gamma / denom
    if not (denom > 0.0) or not (gamma > 0.0):
        sc[8] = 1.0
    sc[5], sc[6] = alpha, beta
    sc[3], sc[4], sc[7] = gamma, alpha, 0.0


def dots_numpy(r, z, s, w, sc, allreduce=None):
    wr = w * r
    sc[0], sc[1], sc[2] = wr @ z, (w * s) @ z, wr @ r
    if allreduce is not None:
        allreduce(sc[:3])
    _scalars(sc)


def update_numpy(x, r, z, p, q, s, minv, sc):
    if sc[8] != 0.0:
        return  # after a breakdown the iterate stays until the solver restarts
    alpha, beta = sc[5], sc[6]
    p *= beta
    p += z
    q *= beta
    q += s
    x += alpha * p
    r -= alpha * q
    np.multiply(minv, r, out=z)


class _Cuda:
    def __init__(self):
        mod = cuda_module("fem3d.kernels", "cg.cu")
        self.partial = mod.get_function("cg_dots_partial")
        self.finish = mod.get_function("cg_dots_finish")
        self.derive = mod.get_function("cg_scalars")
        self.upd = mod.get_function("cg_update")
        self.part = None

    def blocks(self, n):
        return min(_MAX_BLOCKS, (n + _THREADS - 1) // _THREADS)

    def dots(self, r, z, s, w, sc, allreduce=None):
        import cupy as cp

        nb = self.blocks(r.size)
        if self.part is None or self.part.size < 3 * nb:
            self.part = cp.empty(3 * nb, dtype=np.float64)
        self.partial((nb,), (_THREADS,), (r, z, s, w, self.part, np.int64(r.size)))
        self.finish((1,), (_THREADS,), (self.part, np.int32(nb), sc, np.int32(allreduce is None)))
        if allreduce is not None:
            allreduce(sc[:3])
            self.derive((1,), (1,), (sc,))

    def update(self, x, r, z, p, q, s, minv, sc):
        nb = self.blocks(x.size)
        self.upd((nb,), (_THREADS,), (x, r, z, p, q, s, minv, sc, np.int64(x.size)))


def for_backend(backend):
    """(dots, update) for ``backend``."""
    if backend.is_gpu:
        k = _Cuda()
        return k.dots, k.update
    return dots_numpy, update_numpy
