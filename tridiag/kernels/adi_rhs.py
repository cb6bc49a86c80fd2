"""The element-wise passes of an ADI step (adi_rhs.cu) on a field ``src`` (rows, cols), C order.

``laplacian``: the value is coef (lo0 + hi0 + lo1 + hi1 - 4 src) at interior nodes (the
5-point Laplacian in grid units, neighbours along both axes) and 0 on the edges; otherwise
the value is ``src``. ``accumulate``: out += value, else out = value. ``transpose``: out has
shape (cols, rows) and receives the value transposed. ``out`` must not overlap ``src``.
Both versions round alike (the kernel is compiled without FMA contraction).
"""
from __future__ import annotations

import functools

import numpy as np

from gpucfd.backend import cuda_module, cupy_module

from .build import blocks

TILE = 32  # RHS_TILE in adi_rhs.cu
ROWS = 8  # RHS_ROWS


def adi_pass_numpy(src, out, coef: float, laplacian: bool, accumulate: bool, transpose: bool) -> None:
    """Reference on NumPy (or any array module with NumPy indexing)."""
    o = out.T if transpose else out
    if laplacian:
        mid = src[1:-1, 1:-1]
        value = src.dtype.type(coef) * ((src[:-2, 1:-1] + src[2:, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:]) - 4 * mid)
        if not accumulate:
            o[0], o[-1], o[:, 0], o[:, -1] = 0, 0, 0, 0
        o = o[1:-1, 1:-1]
    else:
        value = src
    if accumulate:
        o += value
    else:
        o[...] = value


@functools.cache
def _function(dtype, device_id: int):
    name = f"adi_pass_{'f64' if dtype == np.float64 else 'f32'}"
    return cuda_module("tridiag.kernels", "adi_rhs.cu", ("--fmad=false",)).get_function(name)


def adi_pass_cuda(src, out, coef: float, laplacian: bool, accumulate: bool, transpose: bool) -> None:
    """The same on CuPy arrays, one tiled kernel launch."""
    rows, cols = src.shape
    fn = _function(np.dtype(src.dtype), cupy_module().cuda.Device().id)
    fn((blocks(cols, TILE), blocks(rows, TILE)), (TILE, ROWS),
       (src, out, np.int32(rows), np.int32(cols), src.dtype.type(coef), np.int32(laplacian), np.int32(accumulate),
        np.int32(transpose)))


def adi_pass(src, out, coef: float = 0.0, laplacian: bool = False, accumulate: bool = False,
             transpose: bool = False) -> None:
    """adi_pass_numpy for NumPy arrays, adi_pass_cuda for CuPy arrays."""
    fn = adi_pass_numpy if isinstance(src, np.ndarray) else adi_pass_cuda
    fn(src, out, coef, laplacian, accumulate, transpose)
