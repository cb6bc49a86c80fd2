"""The period of a time series that has become periodic (vortex shedding, the cavity past its
Hopf bifurcation), and its mean and amplitude over the last periods.

The signal's upward crossings of its mean over the last part of the run are found (linear
interpolation between steps); the period is the mean spacing of the last PERIODS of them. It
counts as periodic where those spacings agree to SPREAD and the peaks of the last two
periods to SPREAD of the amplitude (not still growing or decaying). A signal whose cycles
between crossings alternate (the drag on a cylinder shedding vortices off the channel's
centre line: the upper and the lower vortex pull a little differently, so its peaks differ
from one crossing to the next by more than SPREAD) has a period of two crossings: where one
crossing's cycles do not pass, every second crossing bounds a period.
"""

from __future__ import annotations

import numpy as np

PERIODS = 4  # periods measured at the end of the run
SPREAD = 0.02  # largest relative spread of the periods, and change of the amplitude, of a periodic signal


def periodic(t, y, periods: int = PERIODS) -> dict | None:
    """{"period", "frequency", "mean", "amplitude", "min", "max", "since"} of the signal ``y``
    (n,) at times ``t`` (n,) over its last ``periods`` periods (``since`` the time they start;
    amplitude half of max - min), or None when the signal is not (yet) periodic there."""
    t, y = np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(t) < 8 or not np.isfinite(y).all():
        return None
    half = len(t) // 2
    level = 0.5 * (y[half:].max() + y[half:].min())
    s = y - level
    up = np.flatnonzero((s[:-1] < 0) & (s[1:] >= 0))
    crossings = t[up] + (t[up + 1] - t[up]) * (-s[up] / (s[up + 1] - s[up]))
    for fold in (1, 2):  # crossings per period
        found = _periods(t, y, crossings[::-1][::fold][::-1], periods)
        if found is not None:
            return found
    return None


def _periods(t, y, bounds, periods: int) -> dict | None:
    """periodic()'s result for the periods between the last ``periods`` + 1 of ``bounds``
    (increasing times), or None where they are too few, their lengths or peaks disagree."""
    if len(bounds) < periods + 1:
        return None
    last = bounds[-(periods + 1) :]
    spans = np.diff(last)
    period = float(spans.mean())
    if period <= 0 or np.ptp(spans) > SPREAD * period:
        return None
    window = (t >= last[0]) & (t <= last[-1])
    lo, hi = float(y[window].min()), float(y[window].max())
    amplitude = 0.5 * (hi - lo)
    if amplitude <= 0:
        return None
    peaks = [y[(t >= a) & (t <= b)].max() for a, b in zip(last[-3:-1], last[-2:])]
    if abs(peaks[1] - peaks[0]) > SPREAD * amplitude:
        return None
    return {
        "period": period,
        "frequency": 1.0 / period,
        "mean": _mean(t[window], y[window]),
        "amplitude": amplitude,
        "min": lo,
        "max": hi,
        "since": float(last[0]),
    }


def _mean(t, y) -> float:
    """The time mean of y (n,) over t (n,) by the trapezoidal rule."""
    return float(0.5 * ((y[1:] + y[:-1]) * np.diff(t)).sum() / (t[-1] - t[0]))
