"""Element-by-element product y = sum_e C_e^T A_e C_e x (or with A_e^T).

mats  (E, NL, LD) element matrices, row-major, columns padded with zeros to LD
dofs  (E, NL) int32 global unknown of each local unknown
x, y  (n,) global vectors; y is overwritten
colour_offsets  host sequence: colour c is elements colour_offsets[c]:colour_offsets[c+1]
"""
from __future__ import annotations

import numpy as np

from ..backend import cuda_module

NL = 89  # local unknowns of a Q2-Q1 element: 27 u, 27 v, 27 w, 8 p
LD = 96  # padded row length (multiple of the warp size)
_WARPS = 4  # must match WARPS in ebe.cu


def apply_numpy(mats, dofs, x, y, colour_offsets, transpose=False):
    """NumPy reference (colours need no ordering here: bincount sums race-free)."""
    local = x[dofs]
    A = mats[:, :, :NL]
    if transpose:
        prod = np.matmul(local[:, None, :], A)[:, 0, :]
    else:
        prod = np.matmul(A, local[:, :, None])[:, :, 0]
    y[:] = np.bincount(dofs.ravel(), weights=prod.ravel(), minlength=y.size)


def apply_cuda(mats, dofs, x, y, colour_offsets, transpose=False):
    """CuPy: one launch per colour of ebe_apply / ebe_apply_t (ebe.cu)."""
    kernel = cuda_module("fem3d.kernels", "ebe.cu").get_function("ebe_apply_t" if transpose else "ebe_apply")
    threads = LD if transpose else 32 * _WARPS
    y.fill(0)
    for c in range(len(colour_offsets) - 1):
        e0, e1 = int(colour_offsets[c]), int(colour_offsets[c + 1])
        if e1 > e0:
            kernel((e1 - e0,), (threads,), (mats, dofs, x, y, np.int32(e0), np.int32(e1)))


def for_backend(backend):
    """The implementation for ``backend``."""
    return apply_cuda if backend.is_gpu else apply_numpy
