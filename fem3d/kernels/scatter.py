"""out[idx[k]] += values[k] for a fixed index array idx, the same bits on every run.

Element sums into global vectors (residuals, loads, prolongation, restriction, the coarse
level's assembled matrix) repeat one index pattern many times. ScatterPlan sorts the
pattern once (stably: for each target the k in increasing order); each sum then adds a
target's values in that order, one CUDA thread per target (scatter.cu: no atomics, whose
order changes from run to run and with it the rounding), or NumPy's bincount, which adds
in the same order: both backends give the same bits. ``fold`` adds each target's values to
the target's entry one at a time instead (on a GPU the bits of fem3d.kernels.ebe's products
added colour by colour, which fem3d.kernels.ebe.RowSums sums this way in one launch).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module


class ScatterPlan:
    """The sums by the index array ``idx`` (m,) (any integer type, any shape: raveled) on
    ``backend``; ``add(out, values)`` and ``fold(out, values, accumulate)`` with out (n,) and
    values (m,) float64 of that backend. ``n``: the length of the vectors summed into, where
    fold may overwrite them (without it, fold zeroes out first)."""

    def __init__(self, backend, idx, n: int | None = None):
        xp = backend.xp
        idx = backend.asarray(idx).ravel()
        self.gpu = backend.is_gpu
        self.covers = None  # with n: whether every target 0..n-1 has a value (fold then sets every entry)
        if not self.gpu:
            self.idx = idx
            return
        if idx.size >= 2**31:
            raise ValueError(f"{idx.size} entries exceed the int32 range of the scatter kernel")
        order = xp.argsort(idx, kind="stable")
        ordered = idx[order]
        first = xp.flatnonzero(xp.diff(ordered, prepend=ordered[:1] - 1))
        self.order = order.astype(np.int32)
        self.targets = ordered[first].astype(np.int32)
        self.starts = xp.append(first, idx.size).astype(np.int32)
        self.covers = n is not None and self.targets.size == n

    def add(self, out, values):
        """out += the sums of ``values`` by the plan's index; returns out."""
        if not self.gpu:
            out += np.bincount(self.idx, weights=values, minlength=out.size)
            return out
        n = self.targets.size
        if n:
            kernel = cuda_module("fem3d.kernels", "scatter.cu").get_function("segment_sum")
            kernel((-(-n // 256),), (256,), (values, self.order, self.starts, self.targets, out, np.int32(n)))
        return out

    def fold(self, out, values, accumulate: bool = False):
        """out = (out if ``accumulate``, else 0) + the sums of ``values`` by the plan's index,
        each target's values added to it one at a time in increasing k (on a GPU: the bits
        of adding them to out in turn, as the element products by colours do); returns out."""
        if not self.gpu:
            sums = np.bincount(self.idx, weights=values, minlength=out.size)
            if accumulate:
                out += sums
            else:
                out[:] = sums
            return out
        if not accumulate and not self.covers:
            out.fill(0)
        n = self.targets.size
        if n:
            kernel = cuda_module("fem3d.kernels", "scatter.cu").get_function("segment_fold")
            kernel(
                (-(-n // 256),),
                (256,),
                (values, self.order, self.starts, self.targets, out, np.int32(n), np.int32(accumulate)),
            )
        return out
