"""Element-by-element product y = sum_e C_e^T A_e C_e x (or with A_e^T).

mats  (E, NL, LD) element matrices, row-major, float64 or float32 (the CUDA kernel sums
      in float64 either way, the NumPy reference in the storage precision per element);
      columns beyond NL, if LD > NL, are ignored
dofs  (E, NL) int32 global unknown of each local unknown
x, y  (n,) float64 global vectors; y is overwritten
colour_offsets  host sequence: colour c is elements colour_offsets[c]:colour_offsets[c+1]

Each element's NL x NL matrix is stored unpadded (LD = NL): a block streams the
element's contiguous rows with coalesced loads whatever their alignment, and padding
to a multiple of 32 would only add 8 % to the bytes every product must read.
"""
from __future__ import annotations

import functools
import importlib.resources

import numpy as np

from gpucfd.backend import cuda_module

NL = 89  # local unknowns of a Q2-Q1 element: 27 u, 27 v, 27 w, 8 p
LD = NL  # stored row length
MATRIX_DTYPES = {"float64": np.float64, "float32": np.float32}
_WARPS = 4  # must match WARPS in ebe.cu


def matrix_storage(name: str):
    """The NumPy dtype of element-matrix storage ``name`` (--matrix-dtype)."""
    from gpucfd.errors import InputError

    if name not in MATRIX_DTYPES:
        raise InputError(f"--matrix-dtype must be one of {', '.join(MATRIX_DTYPES)} (got {name!r})")
    return np.dtype(MATRIX_DTYPES[name])
_CUDA_TYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}


def matrix_options(mats) -> tuple[str, ...]:
    """Compiler options of a kernel that reads the element matrices ``mats`` (E, NL, LD)
    through element_matrices.cuh: their row length, entry type and the header's folder."""
    return _options(mats.dtype, mats.shape[2])


@functools.cache
def _options(dtype: np.dtype, ld: int) -> tuple[str, ...]:
    """Cached: finding the package folder costs 0.03-0.1 ms per launch, a large share of a
    product on a coarse multigrid level (scripts/profile_multigrid.py)."""
    folder = importlib.resources.files("fem3d.kernels")
    return f"-DLD={ld}", f"-DMAT_T={_CUDA_TYPES[dtype]}", f"-I{folder}"


def apply_numpy(mats, dofs, x, y, colour_offsets, transpose=False):
    """NumPy reference (colours need no ordering here: bincount sums race-free). Each
    element's product is taken in the storage precision (float32 matrices: x rounded to
    float32, relative differences ~1e-7 from the CUDA kernel's float64 sums; converting
    the matrices instead would cost more than the product), the sum over elements in
    float64."""
    local = x[dofs].astype(mats.dtype, copy=False)
    prod = np.einsum("eji,ej->ei" if transpose else "eij,ej->ei", mats[:, :, :NL], local)  # twice matmul's speed on stacks of matrix-vector products
    y[:] = np.bincount(dofs.ravel(), weights=prod.ravel(), minlength=y.size)


def apply_cuda(mats, dofs, x, y, colour_offsets, transpose=False):
    """CuPy: one launch per colour of ebe_apply / ebe_apply_t (ebe.cu), compiled for the
    storage type and row length of ``mats``."""
    kernel = cuda_module("fem3d.kernels", "ebe.cu", matrix_options(mats)).get_function("ebe_apply_t" if transpose else "ebe_apply")
    threads = 96 if transpose else 32 * _WARPS
    y.fill(0)
    for c in range(len(colour_offsets) - 1):
        e0, e1 = int(colour_offsets[c]), int(colour_offsets[c + 1])
        if e1 > e0:
            kernel((e1 - e0,), (threads,), (mats, dofs, x, y, np.int32(e0), np.int32(e1)))


def bytes_moved(n_elements: int, n: int, itemsize: int = 8) -> int:
    """Bytes one product must move at least: every stored matrix entry (NL x NL of
    ``itemsize`` bytes per element) and unknown index once, x read and y written once
    (n float64 each)."""
    return n_elements * NL * (NL * itemsize + 4) + 2 * 8 * n


def for_backend(backend):
    """The implementation for ``backend``."""
    return apply_cuda if backend.is_gpu else apply_numpy
