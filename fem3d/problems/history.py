"""The time series of an unsteady run: one row per time step, written to history.csv as it
goes (each row flushed, so a crash or a kill keeps every row written before it).

Columns: ``t`` (the time of the row's quantities: the step's end, or the midpoint stage's
time, fem3d.solvers.time_stepping), then the step's ``dt``, ``newton_steps``,
``linear_iterations`` and ``seconds``, then one column per quantity, named by its path in
summary.json's quantities with components x, y, z: ``forces.cylinder.coefficients.x``,
``points.front.pressure``, ``differences.delta_p``, ``fluxes.out``.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np

from gpucfd.output import atomic_path
from .periodic import periodic, spectral_peak

STEP_COLUMNS = ("t", "dt", "newton_steps", "linear_iterations", "seconds")
SKIPPED = {"at", "reference_velocity", "area"}  # settings of a quantity, not measured values
COMPONENTS = "xyz"
ROUND_OFF = 1e-12  # a column whose largest |value| is below this fraction of the largest column's stays at round-off


def above_round_off(series: dict) -> list[str]:
    """The names of the columns of ``series`` {name: values} whose largest |value| exceeds
    ROUND_OFF times that of the largest column: not those that stay at round-off (the z
    components of a 2D flow, the velocity at a stagnation point), whose spectra are noise's
    and which history.png leaves out."""
    peaks = {name: float(np.abs(np.asarray(v, dtype=np.float64)).max(initial=0.0)) for name, v in series.items()}
    top = max(peaks.values(), default=0.0)
    return [name for name, peak in peaks.items() if peak > ROUND_OFF * top]


def flatten(quantities: dict, prefix: str = "") -> dict:
    """{column: float} of the measured values in ``quantities`` (nested dicts and lists of a
    run's quantities; the settings in SKIPPED and the flow rates left out)."""
    out = {}
    for key, value in quantities.items():
        if key in SKIPPED or (not prefix and key == "flow_rates"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            for c, v in zip(COMPONENTS, value):
                out[f"{name}.{c}"] = float(v)
        else:
            out[name] = float(value)
    return out


class History:
    """Rows of a time series, kept in memory and, with ``path`` (rank 0's), appended to a CSV
    file made afresh; the columns are those of the first row. A run continued from a
    checkpoint after ``kept`` steps keeps the file's first ``kept`` rows (those of the steps
    the checkpoint holds; later ones, of steps made again, go) and appends to them."""

    def __init__(self, path: str | None = None, kept: int = 0):
        self.columns, self.rows, self.path = None, [], path
        self._file = self._writer = None
        if path is not None and kept and os.path.isfile(path):
            with open(path, newline="") as fh:
                lines = list(csv.reader(fh))
            if lines:
                self.columns, self.rows = lines[0], [[float(v) for v in r] for r in lines[1 : kept + 1]]
                with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
                    csv.writer(fh).writerows(lines[: kept + 1])
                self._file = open(path, "a", newline="")
                self._writer = csv.writer(self._file)

    def add(self, step, quantities: dict) -> None:
        """A row: the fem3d.solvers.time_stepping.TimeStep ``step`` and the flattened ``quantities``."""
        row = {
            "t": step.t,
            "dt": step.dt,
            "newton_steps": step.nonlinear_steps,
            "linear_iterations": step.linear_iterations,
            "seconds": step.seconds,
            **flatten(quantities),
        }
        if self.columns is None:
            self.columns = list(row)
            if self.path is not None:
                self._file = open(self.path, "w", newline="")
                self._writer = csv.writer(self._file)
                self._writer.writerow(self.columns)
        values = [row.get(c, math.nan) for c in self.columns]
        self.rows.append(values)
        if self._writer is not None:
            self._writer.writerow([v if isinstance(v, int) else repr(float(v)) for v in values])
            self._file.flush()  # to the system: a killed process loses no row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None

    def column(self, name: str) -> list:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def extrema(self) -> dict:
        """{column: {max, t_max, min, t_min, end}} of each quantity column (summary.json's)."""
        if not self.rows:
            return {}
        t = self.column("t")
        out = {}
        for name in self.columns[len(STEP_COLUMNS) :]:
            v = self.column(name)
            hi = max(range(len(v)), key=lambda i: v[i])
            lo = min(range(len(v)), key=lambda i: v[i])
            out[name] = {"max": v[hi], "t_max": t[hi], "min": v[lo], "t_min": t[lo], "end": v[-1], "t_end": t[-1]}
        return out

    def periodic(self) -> dict:
        """{column: fem3d.problems.periodic.periodic} of each quantity column periodic at the end."""
        if not self.rows:
            return {}
        t = self.column("t")
        found = {name: periodic(t, self.column(name)) for name in self.columns[len(STEP_COLUMNS) :]}
        return {name: p for name, p in found.items() if p is not None}

    def spectra(self) -> dict:
        """{column: fem3d.problems.periodic.spectral_peak} of each quantity column above
        round-off (:func:`above_round_off`) that oscillates over the last half of the run."""
        if not self.rows:
            return {}
        t = self.column("t")
        series = {name: self.column(name) for name in self.columns[len(STEP_COLUMNS) :]}
        found = {name: spectral_peak(t, series[name]) for name in above_round_off(series)}
        return {name: p for name, p in found.items() if p is not None}
