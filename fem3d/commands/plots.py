"""Figures of a run (matplotlib, Agg): the cavity's centre-line profiles, the mid-plane, and the
quantities of a run in time.

Each takes the path to write and plain arrays, so that fem3d.commands.picture_process can draw
it in a child process.
"""

from __future__ import annotations

import numpy as np

from gpucfd.output import pyplot
from ..problems.history import above_round_off

HISTORY_PANELS = 6  # panels of history.png


def profiles_png(path: str, profiles: dict, references: list, re: float) -> None:
    """u(y) on the vertical and v(x) on the horizontal centre line (fem3d.problems.references.centre_line_profiles),
    with the reference points."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, name, label in (
        (axes[0], "u_vertical", ("y", "u(0.5, y, 0.5)")),
        (axes[1], "v_horizontal", ("x", "v(x, 0.5, 0.5)")),
    ):
        prof = profiles[name]
        value = prof["velocity"][:, prof["component"]]
        if name == "u_vertical":
            ax.plot(value, prof["coords"], "k-", label="fem3d")
        else:
            ax.plot(prof["coords"], value, "k-", label="fem3d")
        for ref, marker in zip([r for r in references if r["profile"] == name], "os^dv"):
            xy = (ref["values"], ref["coords"]) if name == "u_vertical" else (ref["coords"], ref["values"])
            ax.plot(*xy, marker, mfc="none", label=ref["citation"])
        ax.set_xlabel(label[1] if name == "u_vertical" else label[0])
        ax.set_ylabel(label[0] if name == "u_vertical" else label[1])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"3D lid-driven cavity, Re {re:g}: centre-line velocities")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def slice_png(path: str, plane: dict, title: str) -> None:
    """In-plane speed on the spanwise mid-plane with streamlines of the in-plane velocity.

    plane: x (m,) and y (k,) uniform coordinates, z, and velocity (k, m, 3), NaN outside
    the mesh (fem3d.discretisation.fields.mid_plane). The streamlines start inside the plane at
    matplotlib's evenly spaced seeds and end at walls, at rest and near other lines.
    """
    plt = pyplot()
    u, v = (np.ma.masked_invalid(plane["velocity"][..., c]) for c in (0, 1))
    speed = np.ma.sqrt(u**2 + v**2)
    aspect = (plane["x"][-1] - plane["x"][0]) / (plane["y"][-1] - plane["y"][0])
    width = min(12.0, max(7.5, 5.5 * aspect))  # 7.5 x 6.5 inches for a square plane, wider for a channel
    fig, ax = plt.subplots(figsize=(width, max(3.0, min(6.5, width / aspect + 1.2))))
    image = ax.pcolormesh(plane["x"], plane["y"], speed, shading="gouraud", cmap="viridis")
    ax.streamplot(plane["x"], plane["y"], u, v, color="white", linewidth=0.8, density=1.6, arrowsize=0.8)
    fig.colorbar(image, ax=ax, label="in-plane speed")
    ax.set_aspect("equal")
    ax.set_xlim(plane["x"][0], plane["x"][-1])
    ax.set_ylim(plane["y"][0], plane["y"][-1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"{title}: mid-plane z = {plane['z']:g}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def history_panels(series: dict) -> list[str]:
    """The columns of ``series`` {name: values} that history.png shows (:func:`history_png`)."""
    shown = [
        name
        for name in above_round_off(series)
        if not (".force." in name and name.replace(".force.", ".coefficients.") in series)
    ]
    return (shown or list(series)[:1])[:HISTORY_PANELS]


def history_png(path: str, t, series: dict, title: str) -> None:
    """The reported quantities of a run in time against t (history.csv's columns ``series``
    {name: values}, t (n,)): one panel per column, leaving out forces whose coefficients are
    reported and columns that stay at round-off (fem3d.problems.history.above_round_off), at
    most HISTORY_PANELS."""
    plt = pyplot()
    shown = [(name, np.asarray(series[name])) for name in history_panels(series)]
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 1.8 * len(shown) + 0.8), sharex=True, squeeze=False)
    for ax, (name, values) in zip(axes[:, 0], shown):
        ax.plot(t, values, "-", lw=1.2)
        ax.set_ylabel(name.replace(".", "\n", 1), fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
