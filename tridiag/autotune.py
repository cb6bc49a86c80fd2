"""method="auto": the fastest direct method measured for a shape (cached per process).

On the CPU auto is Thomas. On the GPU the first solve of a shape (outer, n, inner, dtype)
times every direct method (and each chunk of the hybrid) on that input (median of three
samples of five back-to-back solves, after one warm-up) and keeps the winner for later
solves of that shape.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import Backend

from . import methods
from .kernels import hybrid

_CHOICE: dict = {}


def candidates(batch):
    """(method, options) pairs tried for the batch."""
    cands = [("hybrid", {})]
    if batch.inner == 1:
        cands += [
            ("hybrid", {"chunk": ch})
            for ch in hybrid.CHUNKS
            if ch != hybrid.default_chunk(batch.n, batch.dtype) and hybrid.onchip_fits(batch.n, ch, batch.dtype)
        ]
    cands += [("pta", {}), ("cr", {}), ("cr_sorted", {}), ("pcr", {"mapping": "auto", "arrays": 4})]
    return cands


def choose(batch):
    """(method, options) for the batch: thomas on the CPU, the measured fastest on the GPU."""
    xp = batch.xp
    if xp is np:
        return "thomas", {}
    key = (batch.outer, batch.n, batch.inner, batch.dtype.str)
    if key not in _CHOICE:
        backend = Backend("gpu", xp, xp.cuda.Device().id)
        x3 = xp.empty(batch.a.shape, dtype=batch.dtype)
        timed = []
        for method, opts in candidates(batch):
            seconds = backend.time_call(
                lambda: [methods.run(method, batch, x3, opts) for _ in range(5)], repeat=3, warmup=1
            )
            timed.append((seconds, method, opts))
        _, method, opts = min(timed, key=lambda t: t[0])
        _CHOICE[key] = (method, opts)
    method, opts = _CHOICE[key]
    return method, dict(opts)
