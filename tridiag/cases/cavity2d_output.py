"""Results of a python -m tridiag.cases.cavity2d run: the run record, the analysis against Ghia et al.
and the files (summary.json, profiles.csv, cavity2d.vtu first; fields.png, profiles.png last).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import ConvergenceError
from gpucfd.output import write_csv, write_json

from . import ghia1982
from .flow_analysis import minimum, sample
from .flow_output import fields_png, profiles_png, write_vtu
from .pictures import draw
from .vorticity import Grid


def analyse(grid: Grid, psi, u, v, re: float) -> dict:
    """Centre-line profiles, the primary vortex and, at Re 100, 400, 1000, the differences from
    Ghia et al. (our fields sampled bicubically at their points). Host (ny, nx) inputs."""
    x, y = grid.coordinates()
    out = {
        "u_line": (y, sample(u, grid, np.full_like(y, 0.5), y)),
        "v_line": (x, sample(v, grid, x, np.full_like(x, 0.5))),
        "psi_min": minimum(psi, grid),
        "reference": ghia1982.reference(re),
    }
    ref = out["reference"]
    if ref is not None:
        (yr, ur), (xr, vr) = ref["u"], ref["v"]
        du = sample(u, grid, np.full_like(yr, 0.5), yr) - ur
        dv = sample(v, grid, xr, np.full_like(xr, 0.5)) - vr
        out["ghia_points"] = {"u": (yr, ur, du), "v": (xr, vr, dv)}
        psi_ref = ghia1982.primary_vortex()[int(re)]
        sus_u, sus_v = ref["suspect"]["u"], ref["suspect"]["v"]
        out["ghia"] = {
            "max_abs_du": float(np.abs(du).max()),
            "at_y": float(yr[np.argmax(np.abs(du))]),
            "max_abs_dv": float(np.abs(dv).max()),
            "at_x": float(xr[np.argmax(np.abs(dv))]),
            "max_abs_du_without_suspect": float(np.abs(du[~sus_u]).max()),
            "max_abs_dv_without_suspect": float(np.abs(dv[~sus_v]).max()),
            "suspect_points": {"u_at_y": yr[sus_u].tolist(), "v_at_x": xr[sus_v].tolist()},
            "psi_min": psi_ref[0],
            "psi_min_x": psi_ref[1],
            "psi_min_y": psi_ref[2],
            "citation": ghia1982.CITATION,
        }
    return out


@dataclass
class CavityRun:
    """One run as its writers need it. fields: host float64 (n+1, n+1) arrays psi, omega, u, v;
    result: VorticitySolver.march's {"steps", "converged", "residual", "history"}; error: the
    ConvergenceError that stopped it (diverged), else None; seconds: the march, seconds_total:
    the whole command up to the output."""

    re: float
    n: int
    solver: str
    methods: dict  # tridiag method of the x- and y-lines
    dtype: str
    device: str
    command: str
    fixed_iterations: bool  # --iterations mode: run exactly that many, whatever the residual
    tol: float
    grid: Grid
    dt: float
    wall_relaxation: float
    psi_sweeps: int
    fields: dict
    result: dict
    error: ConvergenceError | None
    seconds: float
    seconds_total: float

    @property
    def converged(self) -> bool:
        return self.error is None and self.result["residual"] <= self.tol

    @property
    def reason(self) -> str:
        if self.error is not None:
            return self.error.reason
        return "converged" if self.converged else ("fixed iterations" if self.fixed_iterations else "iteration cap")

    @functools.cached_property
    def analysis(self) -> dict | None:
        """:func:`analyse` of the fields; None for a diverged run."""
        if self.error is not None:
            return None
        f = self.fields
        return analyse(self.grid, f["psi"], f["u"], f["v"], self.re)


def write_results(run: CavityRun, out: str) -> list:
    """profiles.csv and cavity2d.vtu (not for a diverged run), each atomically; returns the file
    names written."""
    files = []
    a = run.analysis
    if a is not None:
        rows = [["u_vertical", "grid", 0.5, yy, val, "", ""] for yy, val in zip(*a["u_line"])]
        rows += [["v_horizontal", "grid", xx, 0.5, val, "", ""] for xx, val in zip(*a["v_line"])]
        if "ghia_points" in a:
            rows += [["u_vertical", "ghia", 0.5, yy, ref + d, ref, d] for yy, ref, d in zip(*a["ghia_points"]["u"])]
            rows += [["v_horizontal", "ghia", xx, 0.5, ref + d, ref, d] for xx, ref, d in zip(*a["ghia_points"]["v"])]
        write_csv(
            os.path.join(out, "profiles.csv"), ["profile", "point", "x", "y", "value", "ghia", "difference"], rows
        )
        write_vtu(os.path.join(out, "cavity2d.vtu"), run.grid, run.fields)
        files += ["profiles.csv", "cavity2d.vtu"]
    return files


def draw_pictures(run: CavityRun, out: str, prog: str) -> list:
    """fields.png and profiles.png (not for a diverged run); returns the names drawn."""
    a = run.analysis
    if a is None:
        return []
    title = f"2D lid-driven cavity, Re {run.re:g}, {run.n} x {run.n} cells"
    f = run.fields
    return draw(
        out,
        [
            (
                "fields.png",
                lambda path: fields_png(
                    path, run.grid, f["psi"], f["omega"], title + ": vorticity and streamlines", omega_range=5.0
                ),
            ),
            (
                "profiles.png",
                lambda path: profiles_png(
                    path,
                    a["u_line"],
                    a["v_line"],
                    a["reference"],
                    title + ": centre-line velocities",
                    "tridiag.cases.cavity2d",
                    ghia1982.CITATION.split(",")[0] + " et al.",
                ),
            ),
        ],
        prog,
    )


def write_summary(run: CavityRun, out: str, files: list) -> dict:
    """summary.json listing ``files`` (and itself), atomically; returns the summary."""
    a = run.analysis
    result = run.result
    summary = {
        "re": run.re,
        "n_cells": run.n,
        "nodes": [run.grid.nx, run.grid.ny],
        "h": run.grid.hx,
        "solver": run.solver,
        "methods": run.methods,
        "device": run.device,
        "dtype": run.dtype,
        "dt": run.dt,
        "wall_relaxation": run.wall_relaxation,
        "psi_sweeps": run.psi_sweeps,
        "mode": "fixed iterations" if run.fixed_iterations else "tolerance",
        "tol": run.tol,
        "iterations": result["steps"],
        "converged": run.converged,
        "reason": run.reason,
        "message": str(run.error) if run.error else None,
        "residual": result["residual"],
        "residual_history": result["history"],
        "seconds": run.seconds,
        "seconds_per_iteration": run.seconds / result["steps"] if result["steps"] else None,
        "seconds_total": run.seconds_total,
        "psi_min": a["psi_min"] if a else None,
        "ghia": a.get("ghia") if a else None,
        "files": ["summary.json", *files],
        "command": run.command,
    }
    write_json(os.path.join(out, "summary.json"), summary)
    return summary


def report(run: CavityRun) -> list:
    """Lines of the run's main results: the primary vortex and the differences from Ghia et al."""
    a = run.analysis
    if a is None:
        return []
    vortex = a["psi_min"]
    lines = [f"psi_min {vortex['value']:.6f} at ({vortex['x']:.4f}, {vortex['y']:.4f})"]
    if "ghia" in a:
        g = a["ghia"]
        suspect = g["suspect_points"]["u_at_y"] + g["suspect_points"]["v_at_x"]
        apart = (
            (
                f" ({g['max_abs_du_without_suspect']:.4f}, {g['max_abs_dv_without_suspect']:.4f} without the suspect "
                f"point{'s' if len(suspect) > 1 else ''} of ghia1982.SUSPECT)"
            )
            if suspect
            else ""
        )
        lines.append(
            f"vs Ghia et al. 1982: max |du| {g['max_abs_du']:.4f} at y = {g['at_y']:.4f}, "
            f"max |dv| {g['max_abs_dv']:.4f} at x = {g['at_x']:.4f}{apart}; their psi_min {g['psi_min']:.6f}"
        )
    return lines
