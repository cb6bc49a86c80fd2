"""Errors of tridiag beyond gpucfd.errors: a pivot that vanished during elimination."""

from __future__ import annotations

from gpucfd.errors import InputError


class ZeroPivotError(InputError):
    """A system of the batch met a zero pivot (or broke down) during elimination.

    ``system`` is the index of the failing system in the batch shape (the input shape
    without the solve axis); ``row`` is the Thomas row whose pivot is exactly zero, or
    None when Thomas would not break down and the chosen method did (its own pivots).
    """

    def __init__(self, message: str, system: tuple, row: int | None):
        super().__init__(message)
        self.system = system
        self.row = row
