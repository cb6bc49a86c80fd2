"""Systems cut into pieces of consecutive rows, for the NumPy references of the
piecewise methods (checkerboard, hybrid)."""

from __future__ import annotations

import numpy as np


def pieces(v, m: int, fill):
    """(n, S) -> (ceil(n / m), m, S): pieces of ``m`` rows, the last one padded with rows
    of ``fill`` (identity rows when a, c, d are padded with 0 and b with 1)."""
    n, s = v.shape
    count = -(-n // m)
    return np.concatenate([v, np.full((count * m - n, s), fill, v.dtype)]).reshape(count, m, s)
