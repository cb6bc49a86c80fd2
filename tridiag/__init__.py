"""Batched tridiagonal solvers on the CPU (NumPy) and the GPU (CuPy): ``tridiag.solve``.

Methods: thomas (reference), pta (one thread per system), cr and cr_sorted (cyclic
reduction, in place or reordered level by level), pcr (parallel cyclic reduction,
one-block or several-block mapping), checkerboard (iterative pieces) and hybrid
(per-thread chunk sweeps + PCR on the reduced system, the fastest). Any n >= 1.
"""

from .errors import ZeroPivotError
from .methods import METHODS
from .solve import solve

__all__ = ["solve", "METHODS", "ZeroPivotError"]
