"""PNG files of the heat-conduction cases (matplotlib, Agg).

Fields are host (n, n) arrays T[j, i] on the nodes x_i = i h, y_j = j h.
"""
from __future__ import annotations

import numpy as np

from fem3d.output import pyplot

PLOT_NODES = 1024  # larger fields are subsampled for the picture


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


def profile_png(path: str, coord: np.ndarray, numerical: np.ndarray, exact: np.ndarray, xlabel: str,
                ylabel: str, title: str) -> None:
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
