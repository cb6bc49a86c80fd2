"""How fine a mesh the lid-driven cube needs for a right answer, and what a mesh is expected to give.

MEASURED holds the largest |difference| of our centre-line profiles from the published
ones (fem3d.problems.references: Wong & Baker 2002 at Re 100, 400, 1000; Albensoeder & Kuhlmann
2005 at Re 1000) on cubes of N^3 elements graded toward the walls (grading 1), converged
to the default tolerance (the runs listed in docs/fem3d.md, accuracy against published
profiles). Between the tabulated N and Re the deviation is interpolated linearly in log N
and log Re; beyond the largest Re it is extrapolated with the mesh
scaled by sqrt(Re) (the wall layers thin like Re^-1/2). Near 0.002 the deviation stops
falling with N: that is the accuracy of the published profiles themselves.
"""

from __future__ import annotations

import math

import numpy as np

TARGET = 0.01  # profiles within this of the published data count as resolved
MARGIN = 0.75  # the automatic mesh aims at TARGET * MARGIN
GRADING = 1.0  # grading of the automatic meshes
# The automatic mesh takes only measured sizes (beyond 40 the deviation is flat): on meshes
# that do not resolve the wall layers it is not monotone in N (docs/fem3d.md).
SIZES = (4, 6, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64)
MEASURED = {
    100.0: {4: 0.0758, 6: 0.0207, 8: 0.0068, 12: 0.0019, 16: 0.0017, 24: 0.0017},
    400.0: {8: 0.0233, 12: 0.0049, 16: 0.0023, 20: 0.0030, 24: 0.0031},
    1000.0: {8: 0.0801, 12: 0.0377, 16: 0.0333, 20: 0.0083, 24: 0.0030, 28: 0.0024, 32: 0.0022, 40: 0.0021},
}


def _at_re(table: dict, n: float) -> float:
    """log-log interpolation in N of one row of MEASURED (constant beyond its ends)."""
    sizes = np.array(sorted(table), dtype=float)
    devs = np.log([table[int(s)] for s in sizes])
    return float(np.exp(np.interp(math.log(n), np.log(sizes), devs)))


def expected_deviation(re: float, n: float) -> float:
    """Largest deviation from the published profiles expected on a graded n^3 cube at ``re``."""
    rows = sorted(MEASURED)
    if re >= rows[-1]:
        return _at_re(MEASURED[rows[-1]], n * math.sqrt(rows[-1] / re))
    if re <= rows[0]:
        return _at_re(MEASURED[rows[0]], n)
    hi = next(r for r in rows if r >= re)
    lo = rows[rows.index(hi) - 1]
    t = math.log(re / lo) / math.log(hi / lo)
    return math.exp((1 - t) * math.log(_at_re(MEASURED[lo], n)) + t * math.log(_at_re(MEASURED[hi], n)))


def resolving_size(re: float) -> int:
    """The smallest N of SIZES expected within TARGET * MARGIN of the published profiles."""
    return next((n for n in SIZES if expected_deviation(re, n) <= TARGET * MARGIN), SIZES[-1])


# Seconds of a whole run per element and per unit of work(Re) with the default solver (auto: mg on
# these boxes), by device kind (one process), fitted to whole runs (docs/fem3d.md, the time of the automatic mesh).
# The CPU figure errs high on purpose: it keeps --n auto on a CPU from 20^3 (mg's dense coarsest inverse, 5^3
# elements, costs seconds per set-up there) and from 24^3.
SECONDS_PER_ELEMENT = {"cpu": 0.0072, "gpu": 1e-4}
BUDGET_S = {"cpu": 120.0, "gpu": 600.0}  # the automatic mesh stays within this estimate


def work(re: float) -> float:
    """Relative work of a solve at ``re`` (nonlinear steps and Krylov iterations grow with Re)."""
    return 1.0 + re / 250.0


def estimated_seconds(kind: str, re: float, n: int, ranks: int = 1) -> float:
    """Rough wall time of `python -m fem3d.cavity` on an n^3 cube on ``ranks`` devices of ``kind``.
    CPU ranks are not counted: they share the cores and memory bandwidth that one process
    already uses (docs/parallel.md, CPU ranks)."""
    return SECONDS_PER_ELEMENT[kind] * n**3 * work(re) / (ranks if kind == "gpu" else 1)


def automatic_size(re: float, kind: str, ranks: int = 1) -> int:
    """The mesh of ``--n auto``: the resolving size (:func:`resolving_size`) if its estimated
    time is within BUDGET_S[kind], else the largest of SIZES that is (at least 4)."""
    n = resolving_size(re)
    if estimated_seconds(kind, re, n, ranks) <= BUDGET_S[kind]:
        return n
    affordable = [s for s in SIZES if estimated_seconds(kind, re, s, ranks) <= BUDGET_S[kind]]
    return max(affordable, default=SIZES[0])
