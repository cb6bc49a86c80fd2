"""Validation of solve's inputs and their canonical storage.

Every solver works on C-contiguous arrays of shape (outer, n, inner): system ``s`` starts
at element ``(s // inner) * n * inner + s % inner`` and its rows lie ``inner`` apart.
``axis=-1`` inputs give inner = 1 (each system contiguous, "contiguous" layout);
``axis=0`` of a 2D input gives outer = 1 (row k of all systems contiguous, "interleaved").
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from gpucfd.backend import cupy_module
from gpucfd.errors import InputError

LAYOUTS = ("auto", "contiguous", "interleaved")
_NAMES = ("a", "b", "c", "d")


@dataclass
class Batch:
    """Inputs in canonical storage; ``moved`` is the shape they were reshaped from."""

    xp: Any
    a: Any
    b: Any
    c: Any
    d: Any
    shape: tuple  # broadcast shape of the inputs, solve axis included
    axis: int  # solve axis of ``shape`` (non-negative)
    layout: str  # "auto" keeps the input order; otherwise the axis was moved
    moved: tuple  # shape after moving the axis (before the reshape to 3D)

    @property
    def outer(self) -> int:
        return self.a.shape[0]

    @property
    def n(self) -> int:
        return self.a.shape[1]

    @property
    def inner(self) -> int:
        return self.a.shape[2]

    @property
    def nsys(self) -> int:
        return self.outer * self.inner

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def batch_shape(self) -> tuple:
        return self.shape[: self.axis] + self.shape[self.axis + 1 :]

    def system_index(self, s: int) -> tuple:
        """Index in ``batch_shape`` of canonical system ``s`` (systems are numbered in C order)."""
        return tuple(int(k) for k in np.unravel_index(s, self.batch_shape)) if self.batch_shape else ()

    def restore(self, x3):
        """Canonical result (outer, n, inner) back to ``shape``."""
        x = x3.reshape(self.moved)
        if self.layout == "contiguous":
            x = self.xp.moveaxis(x, -1, self.axis)
        elif self.layout == "interleaved":
            x = self.xp.moveaxis(x, 0, self.axis)
        return x

    def canonical_out(self, out):
        """A canonical (outer, n, inner) view of ``out`` if it can be written directly, else None."""
        if self.layout != "auto" or out is None or not out.flags.c_contiguous:
            return None
        return out.reshape(self.outer, self.n, self.inner)


def array_module(arrays):
    """cupy if every input is a CuPy array, numpy if none is; InputError for a mix."""
    cp = cupy_module()
    on_gpu = [cp is not None and isinstance(x, cp.ndarray) for x in arrays]
    if all(on_gpu):
        return cp
    if any(on_gpu):
        raise InputError("a, b, c, d must all be NumPy arrays or all CuPy arrays (got a mix)")
    return np


def canonical(a, b, c, d, axis: int = -1, layout: str = "auto") -> Batch:
    """Validate a, b, c, d and return them as a Batch in canonical storage."""
    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    xp = array_module((a, b, c, d))
    arrays = [xp.asarray(x) for x in (a, b, c, d)]
    for name, x in zip(_NAMES, arrays):
        if x.dtype not in (np.float32, np.float64):
            raise InputError(f"{name}: dtype must be float32 or float64 (got {x.dtype})")
        if x.ndim == 0:
            raise InputError(f"{name} must have at least one dimension (got a scalar)")
    try:
        shape = tuple(np.broadcast_shapes(*(x.shape for x in arrays)))
    except ValueError:
        shapes = ", ".join(f"{n}{tuple(x.shape)}" for n, x in zip(_NAMES, arrays))
        raise InputError(f"a, b, c, d shapes must broadcast together (got {shapes})") from None
    ndim = len(shape)
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise InputError(f"axis must be an integer in [{-ndim}, {ndim}) (got {axis!r})")
    axis = int(axis) % ndim
    n = shape[axis]
    if n < 1:
        raise InputError(f"system length N (axis {axis} of shape {shape}) must be >= 1 (got 0)")
    dtype = np.result_type(*(x.dtype for x in arrays))
    moved = list(shape)
    if layout == "contiguous":
        moved = moved[:axis] + moved[axis + 1 :] + [n]
        outer, inner = prod(moved[:-1]), 1
    elif layout == "interleaved":
        moved = [n] + moved[:axis] + moved[axis + 1 :]
        outer, inner = 1, prod(moved[1:])
    else:
        outer, inner = prod(shape[:axis]), prod(shape[axis + 1 :])

    def prepare(x):
        if layout == "auto" and x.shape == shape and x.dtype == dtype and x.flags.c_contiguous:
            return x.reshape(outer, n, inner)  # already canonical: no copy, few calls
        x = xp.broadcast_to(x.astype(dtype, copy=False), shape)
        if layout == "contiguous":
            x = xp.moveaxis(x, axis, -1)
        elif layout == "interleaved":
            x = xp.moveaxis(x, axis, 0)
        return xp.ascontiguousarray(x).reshape(outer, n, inner)

    a3, b3, c3, d3 = (prepare(x) for x in arrays)
    return Batch(xp, a3, b3, c3, d3, shape, axis, layout, tuple(moved))
