"""PNG files of the square-cylinder runs (matplotlib, Agg): the near wake, the probe signal, St(Re)."""
from __future__ import annotations

import numpy as np

from fem3d.output import pyplot

from .flow_output import fields_png as grid_fields_png
from .vorticity import Grid

WINDOW = (-4.0, 20.0)  # x range of the field plot, D from the cylinder centre


def fields_png(path: str, flow, backend, title: str) -> None:
    """Vorticity and streamlines of ``flow`` (a CylinderFlow) in the window x_c − 4D … x_c + 20D."""
    g = flow.grid
    x_c = flow.channel.centre[0]
    i0 = max(0, int((x_c + WINDOW[0]) / g.hx))
    i1 = min(g.nx, int((x_c + WINDOW[1]) / g.hx) + 1)
    window = Grid(i1 - i0, g.ny, g.hx, g.hy, x0=i0 * g.hx, y0=g.y0)
    psi = backend.to_numpy(flow.psi[:, i0:i1]).astype(np.float64)
    omega = backend.to_numpy(flow.omega[:, i0:i1]).astype(np.float64)
    grid_fields_png(path, window, psi, omega, title + ": vorticity and streamlines")


def probe_png(path: str, t, v, title: str) -> None:
    """The probe's cross-stream velocity v(t)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(t, v, "k-", lw=0.8)
    ax.set(xlabel="t  [D / U_max]", ylabel="v  [U_max]", title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def validation_png(path: str, steady: list, unsteady: list, lr_reference, title: str) -> None:
    """Two panels: L_r/D against Re (ours: points (re, lr); the reference fit ``lr_reference(re)``,
    None outside its range, as a line) and St against Re (ours: points (re, st))."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    re = np.linspace(5.0, 60.0, 111)
    fit = [lr_reference(r) for r in re]
    left.plot(re, [np.nan if f is None else f for f in fit], "k-", lw=0.8, label="Breuer et al. fit")
    for ax, rows, name in ((left, steady, "L_r / D"), (right, unsteady, "St = f D / U_max")):
        rows = sorted((r, v) for r, v in rows if v is not None)
        if rows:
            ax.plot(*zip(*rows), "o", mfc="none", label="tridiag.cylinder")
            ax.legend(fontsize=8)
        ax.set(xlabel="Re = U_max D / ν", ylabel=name)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
