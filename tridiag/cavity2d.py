"""python -m tridiag.cavity2d: the steady 2D lid-driven cavity by vorticity–stream-function ADI.

The unit square, lid y = 1 moving in +x at speed 1, no-slip walls elsewhere; n × n cells
((n+1)² nodes, h = 1/n). Each iteration is one ADI step of the vorticity transport and
``--psi-sweeps`` ADI sweeps of the stream-function Poisson equation
(tridiag.vorticity_solver), every line solve by tridiag.solve with ``--solver``. The run
stops once the steady residual is <= --tol, or after exactly --iterations steps (timing).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from fem3d.backend import get_backend, resolve_dtype
from fem3d.errors import ArgumentParser, ConvergenceError, check_range, run_cli
from fem3d.output import ensure_writable_dir, write_csv, write_json

from . import ghia1982
from .flow_analysis import minimum, sample
from .cli import add_flow_arguments
from .line_solver import check_solver
from .vorticity import Boundary, Grid, velocity
from .vorticity_solver import VorticitySolver


def default_tol(dtype: str, n: int) -> float:
    """1e-6 in float64; in float32 max(1e-4, 1e-7 n²): the round-off floor of the residual grows
    like 1/h² (measured about 4e-5 on 32² cells)."""
    return 1e-6 if dtype == "float64" else max(1e-4, 1e-7 * n * n)
def default_dt(re: float, h: float) -> float:
    """Δt = CFL h (lid speed 1) with CFL = 12 / Pe clipped to [2, 8], Pe = Re h the cell Reynolds
    number: central convection needs small CFL numbers at large Pe. Measured with converging runs
    (CFL, Pe): Re 1000 (2, 15.6) (3, 7.8) (4, 3.9); Re 400 (4, 3.1) (6, 1.6); Re 100 (10, 0.4-1.6);
    (5, 15.6) did not converge."""
    return min(8.0, max(2.0, 12.0 / (re * h))) * h


def wall_relaxation(dt: float, re: float, h: float) -> float:
    """Default under-relaxation of the wall vorticity: min(1, 1 / D), D = Δt / (Re h²) the diffusion
    number. Measured: the explicit Thom coupling diverges once α D exceeds about 2 (α = 1 above D ≈ 2)."""
    return min(1.0, re * h * h / dt)


def cavity(xp, n: int, re: float, dt: float | None = None, solver: str = "thomas", psi_sweeps: int = 2,
           relaxation: float | None = None, dtype=np.float64):
    """(VorticitySolver, ψ, ω) of the cavity on n × n cells, fields zero (fluid at rest); dt defaults
    to :func:`default_dt`, the wall-vorticity relaxation to :func:`wall_relaxation`."""
    grid = Grid.box(1.0, 1.0, n, n)
    fixed = np.ones(grid.shape, dtype=bool)
    fixed[1:-1, 1:-1] = False
    lid = np.zeros(grid.shape)
    lid[-1] = 1.0
    boundary = Boundary.create(xp, grid, fixed, wall_u=lid, dtype=dtype)
    step = default_dt(re, grid.hx) if dt is None else dt
    alpha = wall_relaxation(step, re, grid.hx) if relaxation is None else relaxation
    vs = VorticitySolver(xp, boundary, re, step, solver=solver, psi_sweeps=psi_sweeps, wall_relaxation=alpha, dtype=dtype)
    return vs, xp.zeros(grid.shape, dtype=dtype), xp.zeros(grid.shape, dtype=dtype)


def analyse(grid: Grid, psi, u, v, re: float) -> dict:
    """Centre-line profiles, the primary vortex and, at Re 100, 400, 1000, the differences from
    Ghia et al. (our fields sampled bicubically at their points). Host (ny, nx) inputs."""
    x, y = grid.coordinates()
    out = {"u_line": (y, sample(u, grid, np.full_like(y, 0.5), y)),
           "v_line": (x, sample(v, grid, x, np.full_like(x, 0.5))),
           "psi_min": minimum(psi, grid), "reference": ghia1982.reference(re)}
    ref = out["reference"]
    if ref is not None:
        (yr, ur), (xr, vr) = ref["u"], ref["v"]
        du = sample(u, grid, np.full_like(yr, 0.5), yr) - ur
        dv = sample(v, grid, xr, np.full_like(xr, 0.5)) - vr
        out["ghia_points"] = {"u": (yr, ur, du), "v": (xr, vr, dv)}
        psi_ref = ghia1982.primary_vortex()[int(re)]
        sus_u, sus_v = ref["suspect"]["u"], ref["suspect"]["v"]
        out["ghia"] = {"max_abs_du": float(np.abs(du).max()), "at_y": float(yr[np.argmax(np.abs(du))]),
                       "max_abs_dv": float(np.abs(dv).max()), "at_x": float(xr[np.argmax(np.abs(dv))]),
                       "max_abs_du_without_suspect": float(np.abs(du[~sus_u]).max()),
                       "max_abs_dv_without_suspect": float(np.abs(dv[~sus_v]).max()),
                       "suspect_points": {"u_at_y": yr[sus_u].tolist(), "v_at_x": xr[sus_v].tolist()},
                       "psi_min": psi_ref[0], "psi_min_x": psi_ref[1], "psi_min_y": psi_ref[2],
                       "citation": ghia1982.CITATION}
    return out


def parse(argv):
    ap = ArgumentParser(prog="python -m tridiag.cavity2d", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                        epilog="Re 100 on 64 x 64 cells takes seconds on a CPU; Re 1000 on 256 x 256 a few minutes "
                               "on a GPU. Exit codes: 2 bad input, 3 not converged or diverged (results written and marked).")
    ap.add_argument("--re", type=float, default=100.0, help="Reynolds number (lid speed and side 1; default 100)")
    ap.add_argument("--n", type=int, default=64, help="cells per side: (n+1)^2 nodes, h = 1/n (default 64)")
    ap.add_argument("--tol", type=float, default=None,
                    help="steady residual to reach (max-norm, relative to max|omega|; default 1e-6, in float32 max(1e-4, 1e-7 n^2))")
    ap.add_argument("--max-iterations", type=int, default=200000, help="iteration cap in --tol mode (default 200000)")
    ap.add_argument("--iterations", type=int, default=0,
                    help="run exactly this many iterations whatever the residual (timing mode; default 0: run to --tol)")
    ap.add_argument("--dt", type=float, default=None,
                    help="pseudo time step (default CFL h, CFL = 12 / (Re h) clipped to [2, 8])")
    ap.add_argument("--wall-relaxation", type=float, default=None,
                    help="under-relaxation of the Thom wall vorticity in (0, 1] (default min(1, Re h^2 / dt))")
    add_flow_arguments(ap, "cavity2d-out", "iteration")
    return ap.parse_args(argv)


def _check(args) -> None:
    check_range("--re", args.re, 0, low_open=True)
    check_range("--n", args.n, 4, integer=True)
    check_solver(args.solver)
    check_range("--iterations", args.iterations, 0, integer=True)
    check_range("--max-iterations", args.max_iterations, 1, integer=True)
    check_range("--psi-sweeps", args.psi_sweeps, 1, integer=True)
    check_range("--check-every", args.check_every, 1, integer=True)
    if args.tol is not None:
        check_range("--tol", args.tol, 0, low_open=True)
    if args.dt is not None:
        check_range("--dt", args.dt, 0, low_open=True)
    if args.wall_relaxation is not None:
        check_range("--wall-relaxation", args.wall_relaxation, 0, 1, low_open=True)


def main(argv=None) -> int:
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    _check(args)
    backend = get_backend(args.device)
    dtype = resolve_dtype(args.dtype)
    out = ensure_writable_dir(args.out)
    tol = default_tol(args.dtype, args.n) if args.tol is None else args.tol
    say = (lambda s: print(s, flush=True)) if not args.quiet else (lambda s: None)
    vs, psi, omega = cavity(backend.xp, args.n, args.re, args.dt, args.solver, args.psi_sweeps, args.wall_relaxation, dtype)
    grid = vs.grid
    fixed_count = args.iterations > 0
    say(f"cavity2d Re {args.re:g}: {args.n} x {args.n} cells ({grid.nx} x {grid.ny} nodes), solver {args.solver}, "
        f"dt {vs.dt:g}, wall relaxation {vs.wall_relaxation:.3g}, {args.dtype}, {backend.describe()}; "
        + (f"{args.iterations} iterations" if fixed_count else f"to residual {tol:g}"))

    def progress(step, res, stable):
        say(f"  iteration {step:7d}  residual {res['residual']:.3e} (psi {res['psi']:.2e}, omega {res['omega']:.2e})"
            f"  {time.perf_counter() - t_march:.1f} s")

    backend.synchronize()
    t_march = time.perf_counter()
    error = None
    try:
        result = vs.march(psi, omega, args.iterations if fixed_count else args.max_iterations,
                          None if fixed_count else tol, min(args.check_every, args.iterations or args.check_every), progress)
    except ConvergenceError as exc:
        error, result = exc, {"steps": None, "converged": False, "residual": float("nan"), "history": []}
    backend.synchronize()
    seconds = time.perf_counter() - t_march
    converged = error is None and (result["residual"] <= tol)
    summary = _outputs(args, argv, out, vs, psi, omega, backend, result, converged, seconds, t_start, tol, error, say)
    if error is not None:
        raise ConvergenceError(f"{error} (results in {out} marked as not converged)", error.reason)
    if not fixed_count and not converged:
        raise ConvergenceError(f"residual {result['residual']:.2e} > --tol {tol:g} after {result['steps']} iterations "
                               f"(results in {out} marked as not converged)", "iteration cap")
    say(f"wrote {out}/: {', '.join(summary['files'])}")
    return 0


def _outputs(args, argv, out, vs, psi, omega, backend, result, converged, seconds, t_start, tol, error, say) -> dict:
    """summary.json, profiles.csv, cavity2d.vtu and the PNGs; returns the summary."""
    from .flow_output import fields_png, profiles_png, write_vtu

    grid = vs.grid
    u, v = velocity(psi, grid, vs.boundary)
    psi_h, omega_h, u_h, v_h = (backend.to_numpy(f).astype(np.float64) for f in (psi, omega, u, v))
    files = ["summary.json"]
    a = analyse(grid, psi_h, u_h, v_h, args.re) if error is None else None
    if a is not None:
        rows = [["u_vertical", "grid", 0.5, yy, val, "", ""] for yy, val in zip(*a["u_line"])]
        rows += [["v_horizontal", "grid", xx, 0.5, val, "", ""] for xx, val in zip(*a["v_line"])]
        if "ghia_points" in a:
            rows += [["u_vertical", "ghia", 0.5, yy, ref + d, ref, d] for yy, ref, d in zip(*a["ghia_points"]["u"])]
            rows += [["v_horizontal", "ghia", xx, 0.5, ref + d, ref, d] for xx, ref, d in zip(*a["ghia_points"]["v"])]
        write_csv(os.path.join(out, "profiles.csv"), ["profile", "point", "x", "y", "value", "ghia", "difference"], rows)
        write_vtu(os.path.join(out, "cavity2d.vtu"), grid, {"psi": psi_h, "omega": omega_h, "u": u_h, "v": v_h})
        files += ["profiles.csv", "cavity2d.vtu"]
        if not args.no_plots:
            title = f"2D lid-driven cavity, Re {args.re:g}, {args.n} x {args.n} cells"
            fields_png(os.path.join(out, "fields.png"), grid, psi_h, omega_h, title + ": vorticity and streamlines",
                       omega_range=5.0)
            profiles_png(os.path.join(out, "profiles.png"), a["u_line"], a["v_line"], a["reference"],
                         title + ": centre-line velocities", "tridiag.cavity2d", ghia1982.CITATION.split(",")[0] + " et al.")
            files += ["fields.png", "profiles.png"]
        vortex = a["psi_min"]
        say(f"psi_min {vortex['value']:.6f} at ({vortex['x']:.4f}, {vortex['y']:.4f})")
        if "ghia" in a:
            g = a["ghia"]
            apart = (f" ({g['max_abs_du_without_suspect']:.4f}, {g['max_abs_dv_without_suspect']:.4f} without the suspect "
                     f"point{'s' if len(g['suspect_points']['u_at_y'] + g['suspect_points']['v_at_x']) > 1 else ''} "
                     "of ghia1982.SUSPECT)") if g["suspect_points"]["u_at_y"] or g["suspect_points"]["v_at_x"] else ""
            say(f"vs Ghia et al. 1982: max |du| {g['max_abs_du']:.4f} at y = {g['at_y']:.4f}, "
                f"max |dv| {g['max_abs_dv']:.4f} at x = {g['at_x']:.4f}{apart}; their psi_min {g['psi_min']:.6f}")
    summary = {
        "re": args.re, "n_cells": args.n, "nodes": [grid.nx, grid.ny], "h": grid.hx,
        "solver": args.solver, "methods": {k: s.method for k, s in vs.omega_lines.items()},
        "device": backend.describe(), "dtype": args.dtype, "dt": vs.dt, "wall_relaxation": vs.wall_relaxation,
        "psi_sweeps": vs.psi_sweeps,
        "mode": "fixed iterations" if args.iterations else "tolerance", "tol": tol,
        "iterations": result["steps"], "converged": converged, "reason": error.reason if error else
        ("converged" if converged else ("fixed iterations" if args.iterations else "iteration cap")),
        "message": str(error) if error else None,
        "residual": result["residual"], "residual_history": result["history"],
        "seconds": seconds, "seconds_per_iteration": seconds / result["steps"] if result["steps"] else None,
        "seconds_total": time.perf_counter() - t_start,
        "psi_min": a["psi_min"] if a else None, "ghia": a.get("ghia") if a else None,
        "files": files, "command": " ".join(["python -m tridiag.cavity2d", *argv]),
    }
    write_json(os.path.join(out, "summary.json"), summary)
    return summary


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="tridiag.cavity2d"))
