"""Completing interface sums between ranks (interface.cu): the sum of all ranks'
partial sums at every interface entry, added in increasing rank order.

v      (n, ...) this rank's vector, completed in place at the entries ``iface``
iface  (m,) int32 local index of each interface slot
recv   (r, ...) the peers' partial sums, concatenated
ptr    (m + 1,) int32: slot j's contributions are src[ptr[j]:ptr[j + 1]], in rank order
src    int32: -1 for this rank's own partial sum, k >= 0 for recv[k]
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module

_THREADS = 256


def combine_numpy(v, iface, recv, ptr, src):
    """NumPy reference: the same additions in the same order as the kernel."""
    own = v[iface]
    acc = np.zeros_like(own)
    counts = np.diff(ptr)
    for level in range(int(counts.max()) if counts.size else 0):
        sel = np.flatnonzero(counts > level)
        s = src[ptr[sel] + level]
        mine = (s < 0).reshape((-1,) + (1,) * (v.ndim - 1))
        acc[sel] += np.where(mine, own[sel], recv[np.maximum(s, 0)])
    v[iface] = acc


def combine_cuda(v, iface, recv, ptr, src):
    """CuPy: one thread per interface slot (float64 vectors)."""
    m = iface.size
    if m:
        kernel = cuda_module("fem3d.kernels", "interface.cu").get_function("interface_combine")
        kernel(((m + _THREADS - 1) // _THREADS,), (_THREADS,), (v, iface, recv, ptr, src, np.int32(m)))


def for_array(v):
    """The implementation for the array ``v`` (NumPy or CuPy)."""
    return combine_numpy if isinstance(v, np.ndarray) else combine_cuda
