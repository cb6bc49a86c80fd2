"""Wake measures of bluff-body flows: shedding frequency and recirculation length.

Both work on host (NumPy) arrays of modest size: a probe's time series and one line
of the velocity field.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucfd.errors import InputError


@dataclass(frozen=True)
class Shedding:
    """A periodic signal's frequency from its upward mean crossings.

    frequency: cycles per unit time; periods: number of whole periods measured;
    spread: (max − min) / mean of the individual periods (0 for a perfectly periodic
    signal); amplitude: half the peak-to-peak range over the measured periods.
    """

    frequency: float
    periods: int
    spread: float
    amplitude: float


def shedding(t, signal, min_periods: int = 3) -> Shedding | None:
    """Frequency of the periodic part of ``signal(t)`` (1D arrays of equal length, t increasing).

    Upward crossings of the signal's mean over its second half are located by linear
    interpolation; the frequency is the number of whole periods between the first and
    the last crossing divided by their time. Returns None when fewer than
    ``min_periods`` periods are found (a steady or not yet periodic signal).
    """
    t = np.asarray(t, dtype=np.float64)
    s = np.asarray(signal, dtype=np.float64)
    if t.ndim != 1 or t.shape != s.shape:
        raise InputError(f"t and signal must be 1D arrays of one length (got {t.shape} and {s.shape})")
    half = t.size // 2
    t, s = t[half:], s[half:]
    if t.size < 4 or not np.isfinite(s).all():
        return None
    s = s - s.mean()
    up = np.flatnonzero((s[:-1] < 0) & (s[1:] >= 0))
    if up.size < min_periods + 1:
        return None
    frac = -s[up] / (s[up + 1] - s[up])
    crossings = t[up] + frac * (t[up + 1] - t[up])
    periods = np.diff(crossings)
    span = slice(up[0], up[-1] + 1)
    return Shedding(
        frequency=float((crossings.size - 1) / (crossings[-1] - crossings[0])),
        periods=int(periods.size),
        spread=float((periods.max() - periods.min()) / periods.mean()),
        amplitude=float(0.5 * (s[span].max() - s[span].min())),
    )


def recirculation_length(x, u, x_rear: float) -> float | None:
    """Distance from ``x_rear`` to the first point downstream where ``u`` turns from < 0 to >= 0.

    x: increasing positions along the wake centre-line; u: the streamwise velocity
    there; x_rear: the body's rear face. The zero is located by linear interpolation
    between the two grid points that bracket it. Returns None when there is no
    reversed flow behind the body (attached flow) or it does not close inside x.
    """
    x = np.asarray(x, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    behind = np.flatnonzero(x >= x_rear - 1e-12 * max(1.0, abs(x_rear)))
    if behind.size < 2:
        return None
    xb, ub = x[behind], u[behind]
    reversed_ = np.flatnonzero(ub < 0)
    if reversed_.size == 0:
        return None
    after = np.flatnonzero(ub[reversed_[0] :] >= 0)
    if after.size == 0:
        return None
    k = reversed_[0] + after[0]
    x0 = xb[k - 1] - ub[k - 1] * (xb[k] - xb[k - 1]) / (ub[k] - ub[k - 1])
    return float(x0 - x_rear)
