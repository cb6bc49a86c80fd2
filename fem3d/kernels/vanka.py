"""Vanka blocks B_e = R_e A R_e^T of an element-by-element matrix (fem3d.solvers.vanka), summed
from element matrices given in chunks: a chunk's element f adds its whole matrix to B_f
and, to each neighbour e's block, the entries whose row and column are both unknowns the
two share.

A        (m, NL, LD) element matrices of the chunk, float64 or float32
slot     (E,) int32 the chunk's row of each element, -1 for elements not in the chunk
targets  (T,) int32 the elements whose blocks are summed
nbr      (E, K) int32 neighbours of each element, -1 where none
pattern  (E, K) int32 how each neighbour meets the element: pattern p holds the shared
         positions ia[starts[p]:starts[p + 1]] (local unknowns of e, distinct) and the
         same slice of ja (the same unknowns as the neighbour's local unknowns)
starts   (P + 1,) int32 (host array for NumPy, device array for CUDA)
out      (T, NL, NL) float32 or float64 blocks of the targets, added to

and their inverses (invert_numpy, invert_cuda).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module
from .ebe import NL, matrix_options

TARGETS = 128  # NumPy reference: target elements per batch (bounds the index temporaries)


def _ragged(starts, lengths):
    """Concatenated ranges starts[k] .. starts[k] + lengths[k] - 1 (int64)."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)


def accumulate_numpy(A, slot, targets, nbr, pattern, ia, ja, starts, out):
    """NumPy reference: for TARGETS target elements at a time, their own matrices and the
    shared entries of their neighbours in the chunk, gathered at once (each pattern's m x m
    entry offsets tabulated first), summed in float64 by one bincount and added to out."""
    ld = A.shape[2]
    m = np.diff(starts).astype(np.int64)
    sq = m * m
    q = _ragged(np.zeros_like(sq), sq)  # entry q of pattern p's m x m block: row q // m, column q % m
    row, col = np.repeat(starts[:-1], sq) + q // np.repeat(m, sq), np.repeat(starts[:-1], sq) + q % np.repeat(m, sq)
    to_table, from_table = ia[row] * NL + ia[col], ja[row] * ld + ja[col]
    for first in range(0, out.shape[0], TARGETS):
        batch = targets[first : first + TARGETS]
        own, nb = slot[batch], nbr[batch]
        theirs = np.where(nb >= 0, slot[nb], -1)
        e, k = np.nonzero(theirs >= 0)
        if e.size == 0 and not (own >= 0).any():
            continue
        block = np.zeros((len(own), NL, NL))
        block[own >= 0] = A[own[own >= 0], :, :NL]
        f, p = theirs[e, k].astype(np.int64), pattern[batch][e, k]
        idx = _ragged(np.cumsum(sq)[p] - sq[p], sq[p])
        to = np.repeat(e * NL * NL, sq[p]) + to_table[idx]
        frm = np.repeat(f * NL * ld, sq[p]) + from_table[idx]
        block.reshape(-1)[:] += np.bincount(to, weights=A.reshape(-1)[frm], minlength=block.size)
        out[first : first + len(own)] += block.astype(out.dtype, copy=False)


def accumulate_cuda(A, slot, targets, nbr, pattern, ia, ja, starts, out):
    """CuPy: one launch of vanka_accumulate (vanka.cu), one thread block per target element."""
    options = matrix_options(A) + (f"-DOUT_T={'float' if out.dtype == np.float32 else 'double'}",)
    kernel = cuda_module("fem3d.kernels", "vanka.cu", options).get_function("vanka_accumulate")
    if out.shape[0]:
        kernel((out.shape[0],), (256,), (A, slot, targets, nbr, pattern, ia, ja, starts, out, np.int32(nbr.shape[1])))


def for_backend(backend):
    """The implementation for ``backend``."""
    return accumulate_cuda if backend.is_gpu else accumulate_numpy


def invert_numpy(blocks):
    """Inverses of blocks (E, n, n), float32 or float64, by LAPACK's LU factorisation and
    getri one block at a time: half the time of numpy.linalg.inv, which solves for the
    identity. numpy.linalg.LinAlgError when a block is singular."""
    from scipy.linalg import lapack  # here: importing SciPy costs a GPU run 0.6 s it never needs

    getrf, getri = lapack.get_lapack_funcs(("getrf", "getri"), dtype=blocks.dtype)
    out = np.empty_like(blocks)
    for e, block in enumerate(blocks):
        lu, piv, info = getrf(block)
        if info == 0:
            out[e], info = getri(lu, piv)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular block {e}")
    return out


INVERT_MAX = 96  # the largest n of invert_cuda: 16 * TILES in vanka.cu


def invert_cuda(blocks):
    """CuPy: inverses of blocks (B, n, n), n <= INVERT_MAX, float32 or float64, as a new
    array of the same shape and dtype: one launch of vanka_invert (vanka.cu), Gauss-Jordan
    elimination of the transposes with partial pivoting in the blocks' precision, one thread
    block per matrix.
    A singular block (a zero pivot) comes back with non-finite entries, the others unaffected;
    nothing is raised: fem3d.solvers.vanka.Vanka.setup checks."""
    import cupy

    n = blocks.shape[1]
    if n > INVERT_MAX:
        raise ValueError(f"invert_cuda takes blocks of at most {INVERT_MAX} x {INVERT_MAX} (got {n} x {n})")
    blocks = cupy.ascontiguousarray(blocks)
    out = cupy.empty_like(blocks)
    if len(blocks):
        kernel = cuda_module("fem3d.kernels", "vanka.cu", matrix_options(blocks)).get_function("vanka_invert")
        kernel((len(blocks),), (256,), (blocks, out, np.int32(n)))
    return out


def inverse_for_backend(backend):
    """The batched inverse for ``backend``."""
    return invert_cuda if backend.is_gpu else invert_numpy
