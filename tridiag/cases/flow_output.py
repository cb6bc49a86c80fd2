"""Result files of the 2D flow cases: VTU (meshio) and PNG (matplotlib, Agg).

Fields are host (ny, nx) arrays on a tridiag.cases.vorticity.Grid.
"""

from __future__ import annotations

import numpy as np

from gpucfd.output import atomic_path, pyplot

from .vorticity import Grid


def write_vtu(path: str, grid: Grid, fields: dict) -> None:
    """Point fields {name: (ny, nx)} on the grid's quadrilateral cells (z = 0) as VTU, node
    j * nx + i at (x_i, y_j), written atomically; opens in ParaView and PyVista."""
    import meshio

    x, y = grid.coordinates()
    gx, gy = np.meshgrid(x, y)
    points = np.column_stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)])
    node = np.arange(grid.nx * grid.ny).reshape(grid.shape)
    quads = np.stack([node[:-1, :-1], node[:-1, 1:], node[1:, 1:], node[1:, :-1]], axis=-1).reshape(-1, 4)
    data = {name: np.ascontiguousarray(f, dtype=np.float64).ravel() for name, f in fields.items()}
    with atomic_path(path) as tmp:
        meshio.write(tmp, meshio.Mesh(points, [("quad", quads)], point_data=data), file_format="vtu", binary=True)


def fields_png(
    path: str, grid: Grid, psi, omega, title: str, omega_range: float | None = None, streamlines: int = 30
) -> None:
    """Vorticity (filled contours, clipped to ±omega_range; default: the 99th percentile of
    |ω|) with streamlines (ψ contours: ``streamlines`` levels spread over ψ's range, with
    extra levels inside the extremes so secondary eddies show)."""
    plt = pyplot()
    x, y = grid.coordinates()
    lim = omega_range or float(np.percentile(np.abs(omega), 99)) or 1.0
    width = 9.0
    height = max(2.5, min(9.0, width * (y[-1] - y[0]) / (x[-1] - x[0]) + 1.0))
    fig, ax = plt.subplots(figsize=(width, height))
    filled = ax.contourf(x, y, np.clip(omega, -lim, lim), levels=np.linspace(-lim, lim, 41), cmap="RdBu_r")
    fig.colorbar(filled, ax=ax, label="vorticity ω")
    lo, hi = float(psi.min()), float(psi.max())
    levels = np.unique(
        np.concatenate(
            [
                np.linspace(lo, hi, streamlines + 2)[1:-1],
                lo * np.array([0.99, 0.9, 0.7]),
                hi * np.array([0.99, 0.9, 0.7]),
                hi * np.array([1e-2, 1e-3, 1e-4, 1e-5]),
                lo * np.array([1e-4, 1e-5]),
            ]
        )
    )
    levels = levels[(levels > lo) & (levels < hi)]
    if levels.size:
        ax.contour(x, y, psi, levels=levels, colors="k", linewidths=0.6, linestyles="solid")
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def profiles_png(
    path: str,
    u_line: tuple,
    v_line: tuple,
    reference: dict | None,
    title: str,
    label: str,
    reference_label: str = "reference",
) -> None:
    """u(y) on the vertical and v(x) on the horizontal centre line, u_line = (y, u), v_line = (x, v),
    with reference points {"u": (y, u), "v": (x, v)} when given."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    left.plot(u_line[1], u_line[0], "k-", label=label)
    right.plot(v_line[0], v_line[1], "k-", label=label)
    if reference is not None:
        left.plot(reference["u"][1], reference["u"][0], "o", mfc="none", label=reference_label)
        right.plot(*reference["v"], "o", mfc="none", label=reference_label)
    left.set(xlabel="u(0.5, y)", ylabel="y")
    right.set(xlabel="x", ylabel="v(x, 0.5)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
