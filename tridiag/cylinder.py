"""python -m tridiag.cylinder: flow past a square cylinder in a channel by vorticity–stream-function ADI.

The Breuer et al. (2000) set-up as in the paper's §6.2 (tridiag.channel): blockage D/H = 1/8,
L = 50D, cylinder at L/4, parabolic inflow, no-slip walls, convective outflow. Re = U_max D/ν,
time in D/U_max, St = f D/U_max with f the frequency of the cross-stream velocity v at the
probe (default 2D behind the rear face on the centre-line). The cylinder's stream function is
set each step from single-valued pressure around it (--body pressure, tridiag.body_pressure) or
held at ψ_in(y_c) (--body fixed). Unsteady runs start with a small vortex blob above the wake
axis (--kick) so that shedding sets in; --steady marches in pseudo-time to a steady residual
and reports the recirculation length L_r/D behind the rear face.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from fem3d.backend import get_backend, resolve_dtype
from fem3d.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from fem3d.output import ensure_writable_dir, write_csv, write_json

from . import breuer2000
from .channel import FLUX, Channel, parse_grid
from .cylinder_flow import BODY, CFL, CylinderFlow, default_dt
from .flow_analysis import sample
from .cli import add_flow_arguments
from .line_solver import check_solver
from .vorticity import velocity
from .wake import recirculation_length, shedding

DEFAULT_TOL = {"float64": 1e-6, "float32": 1e-3}
DEFAULT_T_END = {"unsteady": 150.0, "steady": 400.0}
DEFAULT_KICK = 0.5


def parse(argv):
    ap = ArgumentParser(prog="python -m tridiag.cylinder", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                        epilog="Grids are ny x nx cells over 8D x 50D (the paper's 160x800, 200x1000, 400x2000). "
                               "Exit codes: 2 bad input, 3 diverged or (--steady) not converged; results are written first.")
    ap.add_argument("--re", type=float, default=100.0, help="Reynolds number U_max D / nu (default 100)")
    ap.add_argument("--grid", default="160x800", help="ny x nx cells, e.g. 160x800 (default 160x800)")
    ap.add_argument("--ny", type=int, default=None, help="cells across the channel (overrides --grid)")
    ap.add_argument("--nx", type=int, default=None, help="cells along the channel (overrides --grid)")
    ap.add_argument("--dt", type=float, default=None,
                    help="time step in D/U_max (default --cfl * min(hx, hy), at most Re min(hx, hy)^2)")
    ap.add_argument("--cfl", type=float, default=None,
                    help=f"U_max dt / min(hx, hy) for the default dt (default {CFL['unsteady']:g}, --steady {CFL['steady']:g})")
    ap.add_argument("--t-end", type=float, default=None,
                    help=f"end time in D/U_max (default {DEFAULT_T_END['unsteady']:g}; --steady: the pseudo-time cap, "
                         f"default {DEFAULT_T_END['steady']:g})")
    ap.add_argument("--steady", action="store_true", help="march to a steady state (--tol) and report L_r/D")
    ap.add_argument("--tol", type=float, default=None,
                    help="--steady: residual to reach (max norm relative to max|omega|; default 1e-6, 1e-3 in float32)")
    ap.add_argument("--kick", type=float, default=None,
                    help=f"start-up vortex blob strength, 0 for none (default {DEFAULT_KICK:g}; --steady 0)")
    ap.add_argument("--body", default="pressure",
                    help="the cylinder's stream function: pressure (set each step from single-valued pressure around "
                         "it, so the flux beside it oscillates) or fixed (psi_in at its centre height, Q/2 when centred); "
                         "default pressure")
    ap.add_argument("--probe", default=None, help="probe position X,Y in D (default 2D behind the rear face, on the centre-line)")
    ap.add_argument("--snapshots", type=int, default=1, help="VTU snapshots evenly spaced in time, the last at the end (default 1)")
    add_flow_arguments(ap, "cylinder-out", "step")
    return ap.parse_args(argv)


def _check(args) -> tuple:
    """Validated (ny, nx, probe) from the arguments; InputError naming the first bad one."""
    ny, nx = parse_grid(args.grid)
    ny = ny if args.ny is None else check_range("--ny", args.ny, 16, integer=True)
    nx = nx if args.nx is None else check_range("--nx", args.nx, 50, integer=True)
    check_range("--re", args.re, 0, low_open=True)
    check_solver(args.solver)
    resolve_dtype(args.dtype)
    check_range("--psi-sweeps", args.psi_sweeps, 1, integer=True)
    if args.body not in BODY:
        raise InputError(f"--body must be one of {', '.join(BODY)} (got {args.body!r})")
    check_range("--snapshots", args.snapshots, 1, integer=True)
    check_range("--check-every", args.check_every, 1, integer=True)
    for name in ("dt", "cfl", "t_end", "tol"):
        if getattr(args, name) is not None:
            check_range("--" + name.replace("_", "-"), getattr(args, name), 0, low_open=True)
    if args.kick is not None:
        check_range("--kick", args.kick, 0)
    probe = None
    if args.probe is not None:
        try:
            probe = tuple(float(p) for p in args.probe.split(","))
        except ValueError:
            probe = ()
        if len(probe) != 2:
            raise InputError(f"--probe must be X,Y in D (got {args.probe!r})")
    return ny, nx, probe


def centre_line(channel: Channel, u) -> tuple:
    """(x, u(x, y_c)) at the grid's x nodes along the cylinder's centre-line y_c (bicubic in y
    when y_c is not a grid line); u a host (ny, nx) field."""
    x, _ = channel.grid.coordinates()
    return x, sample(u, channel.grid, x, np.full_like(x, channel.centre[1]))


def main(argv=None) -> int:
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    ny, nx, probe = _check(args)
    backend = get_backend(args.device)
    dtype = resolve_dtype(args.dtype)
    out = ensure_writable_dir(args.out)
    mode = "steady" if args.steady else "unsteady"
    say = (lambda s: print(s, flush=True)) if not args.quiet else (lambda s: None)
    channel = Channel.create(ny, nx)
    dt = args.dt if args.dt is not None else default_dt(channel, args.cfl or CFL[mode], args.re)
    flow = CylinderFlow(backend.xp, channel, args.re, dt, args.solver, args.psi_sweeps, dtype, probe, args.body)
    kick = (0.0 if args.steady else DEFAULT_KICK) if args.kick is None else args.kick
    flow.kick(kick)
    t_end = args.t_end or DEFAULT_T_END[mode]
    steps = max(1, round(t_end / dt))
    tol = (args.tol or DEFAULT_TOL[args.dtype]) if args.steady else None
    g = channel.grid
    say(f"cylinder Re {args.re:g}: {ny} x {nx} cells (hy = {g.hy:.4g} D, hx = {g.hx:.4g} D), cylinder faces "
        f"x {channel.faces[2]:g}..{channel.faces[3]:g}, y {channel.faces[0]:g}..{channel.faces[1]:g}; "
        f"dt {dt:g}, solver {args.solver}, {args.psi_sweeps} psi sweeps, cylinder psi {args.body}, {args.dtype}, {backend.describe()}; "
        + (f"steady, to residual {tol:g} (t <= {t_end:g})" if args.steady else f"to t = {t_end:g} ({steps} steps)"))
    mismatch = []

    def progress(f, res, stable):
        mismatch.append([f.t, f.pressure_loop()])
        say(f"  t {f.t:8.2f}  step {f.steps:7d}  CFL {stable['cfl']:.2f}  v_probe {f.signal[-1]:+.5f}  "
            f"psi_body {f.body_psi[-1]:.5f}  residual {res['residual']:.2e}  {time.perf_counter() - t_march:.1f} s")

    bounds = [round(steps * k / args.snapshots) for k in range(args.snapshots + 1)]
    snapshots, history, error, result = [], [], None, {"converged": False, "residual": math.nan}
    backend.synchronize()
    t_march = time.perf_counter()
    try:
        for k in range(args.snapshots):
            result = flow.run(bounds[k + 1] - bounds[k], args.check_every, tol, progress)
            history += result["history"]
            if k < args.snapshots - 1 and not result["converged"]:
                snapshots.append(_snapshot(out, flow, backend))
            if result["converged"]:
                break
    except ConvergenceError as exc:
        error = exc
    backend.synchronize()
    seconds = time.perf_counter() - t_march
    if error is None:
        snapshots.append(_snapshot(out, flow, backend))
    summary = _summary(args, argv, flow, backend, kick, tol, result, history, mismatch, seconds, t_start, error, snapshots)
    files = _outputs(args, out, flow, backend, summary, error)
    say(_report(summary))
    if error is not None:
        raise ConvergenceError(f"{error} (results in {out} marked as diverged)", error.reason)
    if args.steady and not summary["converged"]:
        raise ConvergenceError(f"residual {summary['residual']:.2e} > --tol {tol:g} at t = {flow.t:g} "
                               f"(raise --t-end; results in {out} marked as not converged)", "time cap")
    say(f"wrote {out}/: {', '.join(files)}")
    return 0


def _snapshot(out: str, flow: CylinderFlow, backend) -> str:
    """VTU of ψ, ω, u, v at the current step; returns its file name."""
    from .flow_output import write_vtu

    name = f"fields_{flow.steps:07d}.vtu"
    u, v = velocity(flow.psi, flow.grid, flow.boundary)
    fields = {k: backend.to_numpy(a).astype(np.float64) for k, a in
              (("psi", flow.psi), ("omega", flow.omega), ("u", u), ("v", v))}
    write_vtu(os.path.join(out, name), flow.grid, fields)
    return name


def _summary(args, argv, flow, backend, kick, tol, result, history, mismatch, seconds, t_start, error, snapshots) -> dict:
    """The run's summary (see the module docs of the fields in README)."""
    channel, g = flow.channel, flow.grid
    lr = st = None
    if error is None and args.steady:
        u, _ = velocity(flow.psi, g, flow.boundary)
        x, u_line = centre_line(channel, backend.to_numpy(u).astype(np.float64))
        lr = recirculation_length(x, u_line, channel.faces[3])
    if error is None and not args.steady:
        st = shedding(np.asarray(flow.times), np.asarray(flow.signal))
    lr_ref, st_ref = breuer2000.recirculation_length(args.re), breuer2000.strouhal(args.re)
    m = np.array([v for t, v in mismatch if t >= 0.5 * flow.t]) if mismatch else np.zeros(0)
    b = np.asarray(flow.body_psi[len(flow.body_psi) // 2:])
    return {
        "re": args.re, "grid": f"{g.ny - 1}x{g.nx - 1}", "cells": [g.ny - 1, g.nx - 1], "nodes": [g.ny, g.nx],
        "hx": g.hx, "hy": g.hy, "cylinder_faces": {"y_low": channel.faces[0], "y_high": channel.faces[1],
                                                   "x_front": channel.faces[2], "x_rear": channel.faces[3]},
        "body": args.body, "mode": "steady" if args.steady else "unsteady", "kick": kick,
        "solver": args.solver, "methods": {k: s.method for k, s in flow.core.omega_lines.items()},
        "device": backend.describe(), "dtype": args.dtype, "dt": flow.dt, "psi_sweeps": flow.core.psi_sweeps,
        "t": flow.t, "steps": flow.steps, "seconds": seconds,
        "seconds_per_step": seconds / flow.steps if flow.steps else None, "seconds_total": time.perf_counter() - t_start,
        "tol": tol, "converged": bool(result["converged"]) if args.steady else None,
        "residual": result["residual"], "residual_history": history,
        "diverged": error is not None, "message": str(error) if error else None,
        "probe": {"x": flow.probe_node[0], "y": flow.probe_node[1], "quantity": "v"},
        "strouhal": None if st is None else {"st": st.frequency, "periods": st.periods, "spread": st.spread,
                                             "amplitude": st.amplitude},
        "strouhal_breuer": st_ref,
        "strouhal_relative_difference": breuer2000.relative_difference(st.frequency if st else None, st_ref),
        "recirculation_length": lr, "recirculation_length_breuer": lr_ref,
        "recirculation_length_relative_difference": breuer2000.relative_difference(lr, lr_ref),
        "pressure_mismatch": {"description": "(1/Re) closed integral of d(omega)/dn around the body (Thom wall "
                                             "vorticity of the current psi), at the checks of the second half of "
                                             "the run: zero for a single-valued pressure",
                              "mean": float(m.mean()) if m.size else None,
                              "max_abs": float(np.abs(m).max()) if m.size else None,
                              "history": mismatch},
        "psi_body": {"description": "stream function on the cylinder (the flux below it) over the second half of the run",
                     "fixed_value": channel.psi_body, "mean": float(b.mean()) if b.size else None,
                     "amplitude_over_flux": float(0.5 * (b.max() - b.min()) / FLUX) if b.size else None,
                     "file": "probe.csv"},
        "reference": breuer2000.CITATION, "snapshots": snapshots,
        "command": " ".join(["python -m tridiag.cylinder", *argv]),
    }


def _outputs(args, out, flow, backend, summary, error) -> list:
    """summary.json, probe.csv and (unless --no-plots or diverged) fields.png, probe.png; returns the file names."""
    from .cylinder_output import fields_png, probe_png
    write_csv(os.path.join(out, "probe.csv"), ["t", "v", "psi_body"],
              [list(row) for row in zip(flow.times, flow.signal, flow.body_psi)])
    files = ["summary.json", "probe.csv", *summary["snapshots"]]
    if not args.no_plots and error is None:
        title = f"square cylinder, Re {args.re:g}, {summary['grid']} cells, t = {flow.t:.1f}"
        fields_png(os.path.join(out, "fields.png"), flow, backend, title)
        probe_png(os.path.join(out, "probe.png"), flow.times, flow.signal, title + ": v at the probe")
        files += ["fields.png", "probe.png"]
    summary["files"] = files
    write_json(os.path.join(out, "summary.json"), summary)
    return files


def _report(s: dict) -> str:
    """One line of the run's main result."""
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


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="tridiag.cylinder"))
