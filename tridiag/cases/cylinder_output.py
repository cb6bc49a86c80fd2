"""Results of a python -m tridiag.cases.cylinder run: the run record, its summary, the files (summary.json,
probe.csv, VTU snapshots first; fields.png, probe.png last) and the PNGs of the square-cylinder
runs (matplotlib, Agg): the near wake, the probe signal, St(Re).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import ConvergenceError
from gpucfd.output import pyplot, write_csv, write_json

from . import breuer2000
from .channel import FLUX, Channel
from .flow_analysis import sample
from .flow_output import fields_png as grid_fields_png
from .flow_output import write_vtu
from .pictures import draw
from .vorticity import Grid, velocity
from .wake import recirculation_length, shedding

WINDOW = (-4.0, 20.0)  # x range of the field plot, D from the cylinder centre


@dataclass
class CylinderRun:
    """One run as its writers need it. fields: host float64 (ny+1, nx+1) arrays psi, omega, u at
    the end; times, signal, body_psi: the probe's v and ψ on the cylinder per step; result:
    CylinderFlow.run's {"converged", "residual", ...} of the last segment, history: the residuals
    [[step, residual], ...] of all; mismatch: [[t, pressure loop], ...] at the checks; error: the
    ConvergenceError that stopped it (diverged, CFL), else None."""

    re: float
    steady: bool
    body: str
    kick: float
    solver: str
    methods: dict  # tridiag method of the x- and y-lines
    psi_sweeps: int
    dtype: str
    device: str
    command: str
    tol: float | None
    channel: Channel
    dt: float
    t: float
    steps: int
    probe: tuple  # (x, y) of the probe node
    fields: dict
    times: list
    signal: list
    body_psi: list
    result: dict
    history: list
    mismatch: list
    snapshots: list
    error: ConvergenceError | None
    seconds: float
    seconds_total: float


def centre_line(channel: Channel, u) -> tuple:
    """(x, u(x, y_c)) at the grid's x nodes along the cylinder's centre-line y_c (bicubic in y
    when y_c is not a grid line); u a host (ny, nx) field."""
    x, _ = channel.grid.coordinates()
    return x, sample(u, channel.grid, x, np.full_like(x, channel.centre[1]))


def write_snapshot(out: str, flow, backend) -> str:
    """VTU of ψ, ω, u, v of ``flow`` (a CylinderFlow) at its current step, atomically; returns the file name."""
    name = f"fields_{flow.steps:07d}.vtu"
    u, v = velocity(flow.psi, flow.grid, flow.boundary)
    fields = {
        k: backend.to_numpy(a).astype(np.float64)
        for k, a in (("psi", flow.psi), ("omega", flow.omega), ("u", u), ("v", v))
    }
    write_vtu(os.path.join(out, name), flow.grid, fields)
    return name


def summary(run: CylinderRun) -> dict:
    """The run's summary.json content (without "files")."""
    channel, g = run.channel, run.channel.grid
    lr = st = None
    if run.error is None and run.steady:
        lr = recirculation_length(*centre_line(channel, run.fields["u"]), channel.faces[3])
    if run.error is None and not run.steady:
        st = shedding(np.asarray(run.times), np.asarray(run.signal))
    lr_ref, st_ref = breuer2000.recirculation_length(run.re), breuer2000.strouhal(run.re)
    m = np.array([v for t, v in run.mismatch if t >= 0.5 * run.t]) if run.mismatch else np.zeros(0)
    b = np.asarray(run.body_psi[len(run.body_psi) // 2 :])
    return {
        "re": run.re,
        "grid": f"{g.ny - 1}x{g.nx - 1}",
        "cells": [g.ny - 1, g.nx - 1],
        "nodes": [g.ny, g.nx],
        "hx": g.hx,
        "hy": g.hy,
        "cylinder_faces": {
            "y_low": channel.faces[0],
            "y_high": channel.faces[1],
            "x_front": channel.faces[2],
            "x_rear": channel.faces[3],
        },
        "body": run.body,
        "mode": "steady" if run.steady else "unsteady",
        "kick": run.kick,
        "solver": run.solver,
        "methods": run.methods,
        "device": run.device,
        "dtype": run.dtype,
        "dt": run.dt,
        "psi_sweeps": run.psi_sweeps,
        "t": run.t,
        "steps": run.steps,
        "seconds": run.seconds,
        "seconds_per_step": run.seconds / run.steps if run.steps else None,
        "seconds_total": run.seconds_total,
        "tol": run.tol,
        "converged": bool(run.result["converged"]) if run.steady else None,
        "residual": run.result["residual"],
        "residual_history": run.history,
        "diverged": run.error is not None,
        "message": str(run.error) if run.error else None,
        "probe": {"x": run.probe[0], "y": run.probe[1], "quantity": "v"},
        "strouhal": None
        if st is None
        else {"st": st.frequency, "periods": st.periods, "spread": st.spread, "amplitude": st.amplitude},
        "strouhal_breuer": st_ref,
        "strouhal_relative_difference": breuer2000.relative_difference(st.frequency if st else None, st_ref),
        "recirculation_length": lr,
        "recirculation_length_breuer": lr_ref,
        "recirculation_length_relative_difference": breuer2000.relative_difference(lr, lr_ref),
        "pressure_mismatch": {
            "description": "(1/Re) closed integral of d(omega)/dn around the body (Thom wall "
            "vorticity of the current psi), at the checks of the second half of "
            "the run: zero for a single-valued pressure",
            "mean": float(m.mean()) if m.size else None,
            "max_abs": float(np.abs(m).max()) if m.size else None,
            "history": run.mismatch,
        },
        "psi_body": {
            "description": "stream function on the cylinder (the flux below it) over the second half of the run",
            "fixed_value": channel.psi_body,
            "mean": float(b.mean()) if b.size else None,
            "amplitude_over_flux": float(0.5 * (b.max() - b.min()) / FLUX) if b.size else None,
            "file": "probe.csv",
        },
        "reference": breuer2000.CITATION,
        "snapshots": run.snapshots,
        "command": run.command,
    }


def write_results(run: CylinderRun, out: str) -> list:
    """probe.csv, atomically (the VTU snapshots were written during the run); returns the result
    file names, snapshots included."""
    write_csv(
        os.path.join(out, "probe.csv"),
        ["t", "v", "psi_body"],
        [list(row) for row in zip(run.times, run.signal, run.body_psi)],
    )
    return ["probe.csv", *run.snapshots]


def write_summary(out: str, content: dict, files: list) -> None:
    """summary.json: ``content`` (:func:`summary`) listing ``files`` and itself, atomically."""
    write_json(os.path.join(out, "summary.json"), {**content, "files": ["summary.json", *files]})


def draw_pictures(run: CylinderRun, out: str, prog: str) -> list:
    """fields.png and probe.png (not for a diverged run); returns the names drawn."""
    if run.error is not None:
        return []
    g = run.channel.grid
    title = f"square cylinder, Re {run.re:g}, {g.ny - 1}x{g.nx - 1} cells, t = {run.t:.1f}"
    return draw(
        out,
        [
            ("fields.png", lambda path: fields_png(path, run.channel, run.fields["psi"], run.fields["omega"], title)),
            ("probe.png", lambda path: probe_png(path, run.times, run.signal, title + ": v at the probe")),
        ],
        prog,
    )


def report(s: dict) -> str:
    """One line of the run's main result from its summary ``s``."""
    head = f"Re {s['re']:g}, {s['grid']}: {s['steps']} steps to t = {s['t']:.2f} in {s['seconds']:.1f} s"
    if s["diverged"]:
        return head + " (diverged)"
    if s["mode"] == "steady":
        lr, ref = s["recirculation_length"], s["recirculation_length_breuer"]
        text = "no recirculation" if lr is None else f"L_r/D = {lr:.4f}"
        if lr is not None and ref is not None:
            text += f" (Breuer fit {ref:.4f}, {100 * s['recirculation_length_relative_difference']:+.2f} %)"
        return f"{head}; residual {s['residual']:.2e}; {text}"
    st = s["strouhal"]
    if st is None:
        return head + "; no periodic shedding in the probe signal"
    text = f"St = {st['st']:.4f} over {st['periods']} periods (spread {100 * st['spread']:.2f} %)"
    if s["strouhal_breuer"] is not None:
        text += f", Breuer {s['strouhal_breuer']:.4f} ({100 * s['strouhal_relative_difference']:+.2f} %)"
    return f"{head}; {text}"


def fields_png(path: str, channel: Channel, psi, omega, title: str) -> None:
    """Vorticity and streamlines of host (ny+1, nx+1) fields ψ, ω in the window x_c − 4D … x_c + 20D."""
    g = channel.grid
    x_c = channel.centre[0]
    i0 = max(0, int((x_c + WINDOW[0]) / g.hx))
    i1 = min(g.nx, int((x_c + WINDOW[1]) / g.hx) + 1)
    window = Grid(i1 - i0, g.ny, g.hx, g.hy, x0=i0 * g.hx, y0=g.y0)
    grid_fields_png(path, window, psi[:, i0:i1], omega[:, i0:i1], title + ": vorticity and streamlines")


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
            ax.plot(*zip(*rows), "o", mfc="none", label="tridiag.cases.cylinder")
            ax.legend(fontsize=8)
        ax.set(xlabel="Re = U_max D / ν", ylabel=name)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
