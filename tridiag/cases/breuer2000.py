"""Reference values of Breuer et al. (2000) for the square cylinder in a channel (D/H = 1/8).

Read from tridiag/cases/reference_data/breuer2000_square_cylinder.csv; its SOURCES.md says where each
number comes from. Re = U_max D / ν, St = f D / U_max, L_r measured from the rear face.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources

CITATION = (
    "Breuer, Bernsdorf, Zeiser, Durst (2000), Int. J. Heat Fluid Flow 21, 186-196 "
    "(L_r/D correlation second-hand; see tridiag/cases/reference_data/SOURCES.md)"
)


@functools.cache
def _rows() -> tuple:
    path = importlib.resources.files("tridiag.cases").joinpath("reference_data", "breuer2000_square_cylinder.csv")
    with path.open() as fh:
        return tuple(csv.DictReader(fh))


def _fit(name: str) -> tuple:
    row = next(r for r in _rows() if r["quantity"] == name)
    return float(row["value"]), float(row["re_low"]), float(row["re_high"])


def recirculation_length(re: float) -> float | None:
    """L_r/D = a + b Re from the correlation, None outside its range 5 < Re < 60."""
    a, low, high = _fit("lr_fit_intercept")
    b = _fit("lr_fit_slope")[0]
    return a + b * re if low < re < high else None


def strouhal(re: float) -> float | None:
    """St at ``re`` where the file tabulates one, else None."""
    for r in _rows():
        if r["quantity"] == "strouhal" and float(r["re"]) == float(re):
            return float(r["value"])
    return None


def relative_difference(value: float | None, reference: float | None) -> float | None:
    """(value − reference) / reference, None when either is missing."""
    if value is None or reference is None:
        return None
    return (value - reference) / reference
