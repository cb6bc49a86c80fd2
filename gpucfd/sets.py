"""Distinct values of integer arrays (NumPy or CuPy).

NumPy 2.3 and later find np.unique's values of an integer array through a hash table,
which is many times slower than sorting on the index arrays of meshes (docs/performance.md,
host-side kernels). :func:`distinct` sorts, with NumPy or, given ``xp=cupy``, on the GPU;
:func:`members` marks values of a known range instead, faster again.
"""

from __future__ import annotations

import numpy as np


def distinct(a, xp=np):
    """The sorted distinct values of the integer array ``a`` (any shape, flattened) as an
    array of ``xp`` (NumPy or CuPy), equal to np.unique(a); TypeError for an array of
    another kind."""
    k = xp.sort(xp.asarray(a).ravel())
    if not np.issubdtype(k.dtype, np.integer):
        raise TypeError(f"distinct takes integer arrays (got {k.dtype})")
    if not k.size:
        return k
    first = xp.ones(k.shape, dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return k[first]


def members(a, n: int, xp=np):
    """The sorted distinct values of the integer array ``a`` (any shape) whose values lie in
    [0, n), as an array of ``xp``: equal to :func:`distinct`'s, found by marking an (n,) mask."""
    mask = xp.zeros(n, dtype=bool)
    mask[xp.asarray(a).ravel()] = True
    return xp.flatnonzero(mask)
