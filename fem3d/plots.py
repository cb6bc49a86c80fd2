"""Figures of a cavity run: centre-line profiles (matplotlib) and the mid-plane (PyVista)."""
from __future__ import annotations

import numpy as np

from .fields import evaluate, locate
from .output import pyplot


def profiles_png(path: str, profiles: dict, references: list, re: float) -> str:
    """u(y) on the vertical and v(x) on the horizontal centre line, with reference points."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, name, label in ((axes[0], "u_vertical", ("y", "u(0.5, y, 0.5)")), (axes[1], "v_horizontal", ("x", "v(x, 0.5, 0.5)"))):
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
    return path.rsplit("/", 1)[-1]


def slice_png(path: str, mesh, x: np.ndarray, re: float, samples: int = 121) -> str | None:
    """Speed on the spanwise mid-plane with in-plane streamlines, rendered off-screen
    with PyVista; None when PyVista is not installed."""
    try:
        import pyvista as pv
        from vtkmodules.vtkCommonCore import vtkLogger
    except ImportError:
        return None
    vtkLogger.SetStderrVerbosity(vtkLogger.VERBOSITY_ERROR)  # VTK warns when it falls back from X to off-screen rendering
    lo, hi = mesh.points.min(axis=0), mesh.points.max(axis=0)
    zc = 0.5 * (lo[2] + hi[2])
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], samples), np.linspace(lo[1], hi[1], samples))
    pts = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, zc)], axis=1)
    vel, _ = evaluate(mesh, x, *locate(mesh, pts))
    vel = np.nan_to_num(vel)
    spacing = ((hi[0] - lo[0]) / (samples - 1), (hi[1] - lo[1]) / (samples - 1), 1.0)
    plane = pv.ImageData(dimensions=(samples, samples, 1), spacing=spacing, origin=(lo[0], lo[1], zc))
    plane.point_data["speed"] = np.linalg.norm(vel[:, :2], axis=1)
    plane.point_data["in-plane velocity"] = np.column_stack([vel[:, 0], vel[:, 1], np.zeros(len(vel))])
    lines = plane.streamlines_evenly_spaced_2D(vectors="in-plane velocity", start_position=(0.5 * (lo[0] + hi[0]), 0.5 * (lo[1] + hi[1]), zc),
                                               separating_distance=3, separating_distance_ratio=0.5, closed_loop_maximum_distance=0.5)
    plotter = pv.Plotter(off_screen=True, window_size=(900, 800))
    plotter.add_mesh(plane, scalars="speed", cmap="viridis", scalar_bar_args={"title": "in-plane speed"})
    if lines.n_points:
        plotter.add_mesh(lines, color="white", line_width=1.5)
    plotter.add_text(f"Re {re:g}, z = {zc:g}", font_size=12)
    plotter.view_xy()
    plotter.screenshot(path)
    plotter.close()
    return path.rsplit("/", 1)[-1]
