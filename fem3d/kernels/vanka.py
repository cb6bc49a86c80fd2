"""Vanka blocks B_e = R_e A R_e^T of an element-by-element matrix on a structured box
(fem3d.vanka): element e's matrix plus, from each neighbour, the entries whose row and
column are both unknowns the two share.

A       (E, NL, LD) element matrices, float64 or float32
nbr     (E, OFFSETS) int32 neighbour of each element at each grid offset, -1 where none
ia, ja  int32 shared positions of all offsets concatenated; offset o holds
        ia[starts[o]:starts[o + 1]] (local unknowns of e) and the same slice of ja (the
        same unknowns as local unknowns of the neighbour)
starts  (OFFSETS + 1,) int32 (host sequence for NumPy, device array for CUDA)
out     (last - first, NL, NL) float64 blocks of elements first <= e < last, overwritten
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from gpucfd.backend import cuda_module
from .ebe import NL, matrix_options

OFFSETS = 26  # grid offsets (dx, dy, dz) in {-1, 0, 1}^3 other than (0, 0, 0)


def blocks_numpy(A, nbr, ia, ja, starts, out, first: int, last: int):
    """NumPy reference: one gather-add per offset."""
    out[...] = A[first:last, :, :NL]
    flat_out, flat_a, ld = out.reshape(-1), A.reshape(-1), A.shape[2]
    for o in range(OFFSETS):
        a, b = ia[starts[o]:starts[o + 1]], ja[starts[o]:starts[o + 1]]
        e = np.flatnonzero(nbr[first:last, o] >= 0)
        if e.size == 0 or a.size == 0:
            continue
        to = (e[:, None] * NL * NL + (a[:, None] * NL + a[None, :]).ravel()[None, :]).ravel()
        frm = (nbr[first + e, o].astype(np.int64)[:, None] * NL * ld + (b[:, None] * ld + b[None, :]).ravel()[None, :]).ravel()
        flat_out[to] += flat_a[frm]


def blocks_cuda(A, nbr, ia, ja, starts, out, first: int, last: int):
    """CuPy: one launch of vanka_blocks (vanka.cu), one thread block per element."""
    kernel = cuda_module("fem3d.kernels", "vanka.cu", matrix_options(A)).get_function("vanka_blocks")
    if last > first:
        kernel((last - first,), (256,), (A, nbr, ia, ja, starts, out, np.int32(first), np.int32(last)))


def for_backend(backend):
    """The implementation for ``backend``."""
    return blocks_cuda if backend.is_gpu else blocks_numpy


def invert_numpy(blocks):
    """Inverses of blocks (E, n, n), float32 or float64, by LAPACK's LU factorisation and
    getri one block at a time: half the time of numpy.linalg.inv, which solves for the
    identity. numpy.linalg.LinAlgError when a block is singular."""
    getrf, getri = lapack.get_lapack_funcs(("getrf", "getri"), dtype=blocks.dtype)
    out = np.empty_like(blocks)
    for e, block in enumerate(blocks):
        lu, piv, info = getrf(block)
        if info == 0:
            out[e], info = getri(lu, piv)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular block {e}")
    return out


def invert_cuda(blocks):
    """CuPy: batched inverses (cuBLAS); a singular block comes back with non-finite entries
    (CuPy does not raise), which fem3d.vanka.Vanka.setup checks."""
    import cupy

    return cupy.linalg.inv(blocks)


def inverse_for_backend(backend):
    """The batched inverse for ``backend``."""
    return invert_cuda if backend.is_gpu else invert_numpy
