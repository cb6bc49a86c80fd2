"""Results of a python -m tridiag.cases.heat run: the run record, its files (summary.json, centreline.csv
first; field.png, profile.png last) and the PNGs (matplotlib, Agg).

Fields are host (n, n) arrays T[j, i] on the nodes x_i = i h, y_j = j h.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import ConvergenceError
from gpucfd.output import pyplot, write_csv, write_json

from .pictures import draw

PLOT_NODES = 1024  # larger fields are subsampled for the picture


@dataclass
class HeatRun:
    """One run as its writers need it. summary: the run's numbers (summary.json); field: host
    (n, n); line: the centre line (coordinate name, coordinates, T, reference T), ``reference``
    naming the reference ("T_exact" or "T_series") and ``label`` the line (e.g. "T(1/2, y)");
    length: side of the square; title: of the pictures; error: the ConvergenceError that stopped
    the run (raised after the output), else None."""

    summary: dict
    field: np.ndarray
    line: tuple
    reference: str
    label: str
    length: float
    title: str
    error: ConvergenceError | None = None


def write_results(run: HeatRun, out: str) -> list:
    """centreline.csv, then summary.json, atomically; returns the file names."""
    coord, x, t, ref = run.line
    write_csv(os.path.join(out, "centreline.csv"), (coord, "T", run.reference), zip(x, t, ref))
    write_json(os.path.join(out, "summary.json"), run.summary)
    return ["centreline.csv", "summary.json"]


def draw_pictures(run: HeatRun, out: str, prog: str) -> list:
    """field.png and profile.png; returns the names drawn."""
    coord, x, t, ref = run.line
    return draw(
        out,
        [
            ("field.png", lambda path: field_png(path, run.field, run.length, run.title)),
            ("profile.png", lambda path: profile_png(path, x, t, ref, coord, run.label, run.title)),
        ],
        prog,
    )


def field_png(path: str, field: np.ndarray, length: float, title: str) -> None:
    """T over the square [0, length]² (colour map, y upwards)."""
    plt = pyplot()
    step = max(1, -(-field.shape[0] // PLOT_NODES))
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    im = ax.imshow(field[::step, ::step], origin="lower", extent=(0, length, 0, length), cmap="inferno")
    fig.colorbar(im, ax=ax, label="T")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def profile_png(
    path: str, coord: np.ndarray, numerical: np.ndarray, exact: np.ndarray, xlabel: str, ylabel: str, title: str
) -> None:
    """A centre-line profile against the exact solution, with the difference below."""
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, gridspec_kw={"height_ratios": (2, 1)})
    top.plot(coord, exact, "k-", lw=1, label="exact")
    step = max(1, len(coord) // 40)
    top.plot(coord[::step], numerical[::step], "o", mfc="none", ms=4, label="ADI")
    top.set_ylabel(ylabel)
    top.legend()
    top.grid(alpha=0.3)
    top.set_title(title, fontsize=9)
    bottom.plot(coord, numerical - exact, "r-", lw=1)
    bottom.set_xlabel(xlabel)
    bottom.set_ylabel("ADI - exact")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
