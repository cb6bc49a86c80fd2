"""Element-by-element product y = sum_e C_e^T A_e C_e x (or with A_e^T).

mats  (E, NL, LD) element matrices, row-major, float64 or float32 (the CUDA kernel sums
      in float64 either way, the NumPy reference in the storage precision per element),
      or float16 scaled per row (below); columns beyond NL, if LD > NL, are ignored
dofs  (E, NL) int32 global unknown of each local unknown
x, y  (n,) float64 global vectors; y is overwritten, or added to with ``accumulate``
colours  host sequence of (e0, e1) element ranges, each within one colour
         (:func:`colour_ranges` of a mesh's colour_offsets: every element)
row_scale  (E, NL) float32, with float16 ``mats`` H and only then: A_e = diag(row_scale_e) H_e

Each element's NL x NL matrix is stored unpadded (LD = NL): a block streams the
element's contiguous rows with coalesced loads whatever their alignment, and padding
to a multiple of 32 would only add 8 % to the bytes every product must read.

Float16 storage (:func:`quantise`; chosen internally, e.g. for the multigrid smoother's
stored inverses, never by --matrix-dtype) keeps each row divided by its largest |entry|,
so every stored entry lies in [-1, 1], with the row's float32 scale beside it: 89 * 89 * 2
+ 89 * 4 bytes per element instead of 89 * 89 * 4, each entry within about 2^-12 of its
row's largest (half float's rounding).
"""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np

from gpucfd.backend import cuda_module
from gpucfd.threads import batched_matvec

from .scatter import ScatterPlan

NL = 89  # local unknowns of a Q2-Q1 element: 27 u, 27 v, 27 w, 8 p
LD = NL  # stored row length
MATRIX_DTYPES = {"float64": np.float64, "float32": np.float32}  # --matrix-dtype; float16 only internally
_WARPS = 4  # must match WARPS in ebe.cu


def matrix_storage(name: str):
    """The NumPy dtype of element-matrix storage ``name`` (--matrix-dtype)."""
    from gpucfd.errors import InputError

    if name not in MATRIX_DTYPES:
        raise InputError(f"--matrix-dtype must be one of {', '.join(MATRIX_DTYPES)} (got {name!r})")
    return np.dtype(MATRIX_DTYPES[name])


_CUDA_TYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float", np.dtype(np.float16): "__half"}
_NULL = np.uint64(0)  # the kernels' scale argument for float64 or float32 matrices (never read): a null pointer


def quantise(mats, half, scale, at=slice(None)):
    """Rows of ``mats`` (m, NL, LD') float64 or float32 (NumPy or CuPy) into float16
    storage for the elements ``at`` (a slice or an index array of m elements):
    ``half[at, :, :NL]`` (E, NL, LD) float16 = row / s and ``scale[at]`` (E, NL) float32 = s,
    s the row's largest |entry| rounded to float32 (1 for a row of zeros). Stored entries
    lie in [-1, 1]; half * scale differs from the row by at most about 2^-12 s (half
    float's rounding). Columns beyond NL are neither read nor written. Rows that are not
    finite keep a non-finite scale: NaN for a row holding a NaN, inf for one holding an inf
    (or whose largest entry overflows float32)."""
    rows = mats[:, :, :NL]
    s = abs(rows).max(axis=2).astype(np.float32)
    s += s == 0
    half[at, :, :NL] = rows / s[:, :, None]
    scale[at] = s


def matrix_options(mats) -> tuple[str, ...]:
    """Compiler options of a kernel that reads the element matrices ``mats`` (E, NL, LD)
    through element_matrices.cuh: their row length, entry type (and ROW_SCALE for float16)
    and the header's folder."""
    return _options(mats.dtype, mats.shape[2])


@functools.cache
def _options(dtype: np.dtype, ld: int) -> tuple[str, ...]:
    """Cached: finding the package folder costs 0.03-0.1 ms per launch, a large share of a
    product on a coarse multigrid level (scripts/profile_multigrid.py)."""
    folder = importlib.resources.files("fem3d.kernels")
    scaled = ("-DROW_SCALE",) if dtype == np.float16 else ()
    return (f"-DLD={ld}", f"-DMAT_T={_CUDA_TYPES[dtype]}", *scaled, f"-I{folder}")


def _check_scale(mats, row_scale):
    """ValueError unless ``row_scale`` comes with float16 ``mats``, as (E, NL) float32."""
    if (mats.dtype == np.float16) != (row_scale is not None):
        raise ValueError(
            f"row_scale comes with float16 element matrices and only with them (matrices {mats.dtype}, "
            f"row_scale {'None' if row_scale is None else 'given'})"
        )
    if row_scale is not None and (row_scale.dtype != np.float32 or row_scale.shape != mats.shape[:2]):
        raise ValueError(f"row_scale must be {mats.shape[:2]} float32 (got {row_scale.shape} {row_scale.dtype})")


def colour_ranges(colour_offsets) -> list:
    """[(e0, e1)] of each colour: colour c is elements colour_offsets[c]:colour_offsets[c+1]."""
    return [(int(a), int(b)) for a, b in zip(colour_offsets[:-1], colour_offsets[1:])]


def apply_numpy(mats, dofs, x, y, colours, transpose=False, row_scale=None, accumulate=False):
    """NumPy reference (colours need no ordering here: bincount sums race-free). Each
    element's product is taken in the storage precision (float32 matrices: x rounded to
    float32, relative differences ~1e-7 from the CUDA kernel's float64 sums; converting
    the matrices instead would cost more than the product), the sum over elements in
    float64 (the products spread over the host's cores: gpucfd.threads.batched_matvec).
    Float16 matrices are converted to float32 and multiplied by ``row_scale`` first, the
    products then taken in float32."""
    _check_scale(mats, row_scale)
    rows, prods = [], []
    for e0, e1 in _merged(colours):
        m = mats[e0:e1, :, :NL]
        if row_scale is not None:
            m = m.astype(np.float32) * row_scale[e0:e1, :, None]
        prods.append(batched_matvec(m, x[dofs[e0:e1]].astype(m.dtype, copy=False), transpose).ravel())
        rows.append(dofs[e0:e1].ravel())
    join = (lambda a: a[0]) if len(rows) == 1 else np.concatenate  # noqa: E731
    sums = np.bincount(join(rows), weights=join(prods), minlength=y.size) if rows else 0.0
    if accumulate:
        y += sums
    else:
        y[:] = sums


def _merged(colours) -> list:
    """The ranges of ``colours`` with adjacent ones joined (a whole mesh: one range)."""
    out = []
    for e0, e1 in colours:
        if e1 <= e0:
            continue
        if out and out[-1][1] == e0:
            out[-1] = (out[-1][0], e1)
        else:
            out.append((e0, e1))
    return out


def apply_cuda(mats, dofs, x, y, colours, transpose=False, row_scale=None, accumulate=False):
    """CuPy: one launch per range of ebe_apply / ebe_apply_t (ebe.cu), compiled for the
    storage type and row length of ``mats``; ``row_scale`` (float16 ``mats`` only) is
    applied in the kernel."""
    _check_scale(mats, row_scale)
    scale = _NULL if row_scale is None else row_scale
    kernel = _kernel(mats, transpose)
    threads = 96 if transpose else 32 * _WARPS
    last = () if transpose else (_NULL,)  # ebe_apply's products: none, add into y
    if not accumulate:
        y.fill(0)
    for e0, e1 in colours:
        if e1 > e0:
            kernel((e1 - e0,), (threads,), (mats, scale, dofs, x, y, np.int32(e0), np.int32(e1), *last))


class RowSums:
    """y = A x (or y += A x) on a GPU in two launches: ebe_apply writes every element's
    product to its row of ``products`` (E, NL) float64, and the ScatterPlan of ``dofs``
    adds the rows into y (ScatterPlan.fold), each unknown's in increasing element order,
    which is the order of the colours (elements are stored colour by colour): the bits of
    :func:`apply_cuda` over the colours, without its fill and its launches one colour after
    another, each too small to fill the device on a coarse level. Holds 89 float64 and 89
    int32 per element (the products and the plan); operators of the same ``dofs`` may share
    one (fem3d.solvers.operators.ElementOperator)."""

    def __init__(self, backend, dofs, n: int):
        self.plan = ScatterPlan(backend, dofs, n)
        self.products = backend.xp.empty(dofs.shape, dtype=np.float64)

    def apply(self, mats, dofs, x, y, row_scale=None, accumulate=False):
        _check_scale(mats, row_scale)
        scale = _NULL if row_scale is None else row_scale
        n_elements = dofs.shape[0]
        if n_elements:
            _kernel(mats, False)(
                (n_elements,),
                (32 * _WARPS,),
                (mats, scale, dofs, x, y, np.int32(0), np.int32(n_elements), self.products),
            )
        return self.plan.fold(y, self.products.ravel(), accumulate)


def _kernel(mats, transpose: bool):
    return cuda_module("fem3d.kernels", "ebe.cu", matrix_options(mats)).get_function(
        "ebe_apply_t" if transpose else "ebe_apply"
    )


def bytes_moved(n_elements: int, n: int, itemsize: int = 8) -> int:
    """Bytes one product must move at least: every stored matrix entry (NL x NL of
    ``itemsize`` bytes per element), row scale (NL float32 per element, float16 storage:
    itemsize 2) and unknown index once, x read and y written once (n float64 each)."""
    scales = 4 if itemsize == 2 else 0
    return n_elements * NL * (NL * itemsize + scales + 4) + 2 * 8 * n


def for_backend(backend):
    """The implementation for ``backend``."""
    return apply_cuda if backend.is_gpu else apply_numpy
