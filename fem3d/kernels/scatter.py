"""out[idx[k]] += values[k] for a fixed index array idx, the same bits on every run.

Element sums into global vectors (residuals, loads, prolongation, restriction, the coarse
level's assembled matrix) repeat one index pattern many times. ScatterPlan sorts the
pattern once (stably: for each target the k in increasing order); each sum then adds a
target's values in that order, one CUDA thread per target (scatter.cu: no atomics, whose
order changes from run to run and with it the rounding), or NumPy's bincount, which adds
in the same order: both backends give the same bits.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module


class ScatterPlan:
    """The sums by the index array ``idx`` (m,) (any integer type, any shape: raveled) on
    ``backend``; ``add(out, values)`` with out (n,) and values (m,) float64 of that backend."""

    def __init__(self, backend, idx):
        xp = backend.xp
        idx = backend.asarray(idx).ravel()
        self.gpu = backend.is_gpu
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
