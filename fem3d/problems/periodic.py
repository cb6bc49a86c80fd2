"""The period of a time series that has become periodic (vortex shedding, the cavity past its
Hopf bifurcation), and its mean and amplitude over the last periods.

The signal's upward crossings of its mean over the last part of the run are found (linear
interpolation between steps); a period spans FOLD of them, the fewest after which the
cycles between crossings repeat, and its length is the mean over the last PERIODS periods.
It counts as periodic where those lengths agree to SPREAD and the peak of each cycle equals
that of the cycle FOLD crossings earlier to SPREAD of the amplitude (not still growing,
decaying, or modulated more slowly). Cycles that alternate (the drag on a cylinder shedding
vortices off the channel's centre line: the upper and the lower vortex pull a little
differently) repeat after two crossings; the cube cavity past its Hopf bifurcation can
repeat after four.

A signal that oscillates without repeating (modulated, or irregular as the cube cavity
beyond its Hopf bifurcation) has no period but a strongest frequency: :func:`spectral_peak`,
the highest peak of its spectrum over the last half of the run.
"""

from __future__ import annotations

import numpy as np

PERIODS = 4  # periods measured at the end of the run
SPREAD = 0.02  # largest relative spread of the periods, and change of the amplitude, of a periodic signal
FOLDS = (1, 2, 3, 4)  # crossings per period tried, the fewest first
MIN_SAMPLES = 16  # values over the last half of a run that spectral_peak needs
MIN_CYCLES = 3  # cycles over the last half of a run below which spectral_peak sees no oscillation


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
    for fold in FOLDS:
        found = _periods(t, y, crossings, fold, periods)
        if found is not None:
            return found
    return None


def spectral_peak(t, y) -> dict | None:
    """{"frequency", "since"}: the frequency (1 / the unit of ``t``) of the highest peak of the
    spectrum of ``y`` (n,) at increasing times ``t`` (n,) over the last half of the run (from
    ``since``): resampled evenly, its mean and linear trend removed, Hann window, the peak
    refined by a parabola through the logarithms of its bin and its neighbours. None where
    that half has fewer than MIN_SAMPLES values, is not finite or does not vary, or where the
    peak spans fewer than MIN_CYCLES cycles of the half (a drift, a signal settling: no
    oscillation)."""
    t, y = np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    half = t > 0.5 * (t[0] + t[-1]) if len(t) else t > 0
    if half.sum() < MIN_SAMPLES or not np.isfinite(y[half]).all() or np.ptp(y[half]) == 0:
        return None
    grid = np.linspace(t[half][0], t[-1], int(half.sum()))
    signal = np.interp(grid, t[half], y[half])
    signal -= np.polyval(np.polyfit(grid - grid[0], signal, 1), grid - grid[0])
    power = np.abs(np.fft.rfft(signal * np.hanning(len(grid))))
    k = int(power[1:].argmax()) + 1
    if k < MIN_CYCLES:
        return None
    shift = 0.0
    if k < len(power) - 1:
        a, b, c = np.log(power[k - 1 : k + 2] + 1e-300)
        shift = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c < 0 else 0.0
    step = (grid[-1] - grid[0]) / (len(grid) - 1)
    return {"frequency": float((k + shift) / (len(grid) * step)), "since": float(grid[0])}


def _periods(t, y, crossings, fold: int, periods: int) -> dict | None:
    """periodic()'s result for periods of ``fold`` crossings over the last ``periods`` of them
    (``crossings``: increasing times), or None where they are too few, or their lengths or
    their cycles' peaks disagree."""
    cycles = fold * periods
    if len(crossings) < cycles + 1:
        return None
    last = crossings[-(cycles + 1) :]
    spans = np.diff(last[::fold])
    period = float(spans.mean())
    if period <= 0 or np.ptp(spans) > SPREAD * period:
        return None
    window = (t >= last[0]) & (t <= last[-1])
    lo, hi = float(y[window].min()), float(y[window].max())
    amplitude = 0.5 * (hi - lo)
    if amplitude <= 0:
        return None
    peaks = np.array([y[(t >= a) & (t <= b)].max() for a, b in zip(last[:-1], last[1:])])
    if np.abs(peaks[fold:] - peaks[:-fold]).max() > SPREAD * amplitude:
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
