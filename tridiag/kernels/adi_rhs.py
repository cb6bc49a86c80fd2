"""The element-wise passes of an ADI sweep (adi_rhs.cu) on a field ``src`` (rows, cols), C order.

``laplacian``: the value is coef1 (lo1 - 2 src + hi1) + coef0 (lo0 - 2 src + hi0) + coef_source
source at interior nodes that are not ``fixed`` (second differences in grid units along axis 1
and axis 0; ``fixed`` a bool (rows, cols) mask or None, ``source`` a (rows, cols) field or
None), and 0 elsewhere; otherwise the value is ``src``. ``accumulate``: out += value, else
out = value. ``transpose``: out has shape (cols, rows) and receives the value transposed.
``out`` must not overlap ``src``. Both versions round alike (the kernel is compiled without FMA
contraction).
"""

from __future__ import annotations

import functools

import numpy as np

from gpucfd.backend import cuda_module, cupy_module

from .build import NULL, blocks

TILE = 32  # RHS_TILE in adi_rhs.cu
ROWS = 8  # RHS_ROWS


def adi_pass_numpy(
    src,
    out,
    coef0: float,
    coef1: float,
    laplacian: bool,
    accumulate: bool,
    transpose: bool,
    fixed=None,
    source=None,
    coef_source: float = 0.0,
) -> None:
    """Reference on NumPy (or any array module with NumPy indexing)."""
    o = out.T if transpose else out
    if laplacian:
        one = src.dtype.type
        mid = src[1:-1, 1:-1]
        value = one(coef1) * ((src[1:-1, :-2] - 2 * mid) + src[1:-1, 2:]) + one(coef0) * (
            (src[:-2, 1:-1] - 2 * mid) + src[2:, 1:-1]
        )
        if source is not None:
            value = value + one(coef_source) * source[1:-1, 1:-1]
        if fixed is not None:
            value[fixed[1:-1, 1:-1]] = 0
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
def _function(dtype, masked: bool, device_id: int):
    name = f"adi_pass{'_masked' if masked else ''}_{'f64' if dtype == np.float64 else 'f32'}"
    return cuda_module("tridiag.kernels", "adi_rhs.cu", ("--fmad=false",)).get_function(name)


def adi_pass_cuda(
    src,
    out,
    coef0: float,
    coef1: float,
    laplacian: bool,
    accumulate: bool,
    transpose: bool,
    fixed=None,
    source=None,
    coef_source: float = 0.0,
) -> None:
    """The same on CuPy arrays, one tiled kernel launch (the masked kernel when ``fixed`` or
    ``source`` is given)."""
    rows, cols = src.shape
    one = src.dtype.type
    masked = fixed is not None or source is not None
    fn = _function(np.dtype(src.dtype), masked, cupy_module().cuda.Device().id)
    fn(
        (blocks(cols, TILE), blocks(rows, TILE)),
        (TILE, ROWS),
        (
            src,
            out,
            np.int32(rows),
            np.int32(cols),
            one(coef0),
            one(coef1),
            np.int32(laplacian),
            np.int32(accumulate),
            np.int32(transpose),
            NULL if fixed is None else fixed,
            NULL if source is None else source,
            one(coef_source),
        ),
    )


def adi_pass(
    src,
    out,
    coef0: float = 0.0,
    coef1: float = 0.0,
    laplacian: bool = False,
    accumulate: bool = False,
    transpose: bool = False,
    fixed=None,
    source=None,
    coef_source: float = 0.0,
) -> None:
    """adi_pass_numpy for NumPy arrays, adi_pass_cuda for CuPy arrays."""
    fn = adi_pass_numpy if isinstance(src, np.ndarray) else adi_pass_cuda
    fn(src, out, coef0, coef1, laplacian, accumulate, transpose, fixed, source, coef_source)
