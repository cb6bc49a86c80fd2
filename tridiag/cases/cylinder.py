"""python -m tridiag.cases.cylinder: flow past a square cylinder in a channel by vorticity–stream-function ADI.

The Breuer et al. (2000) set-up as in the paper's §6.2 (tridiag.cases.channel): blockage D/H = 1/8,
L = 50D, cylinder at L/4, parabolic inflow, no-slip walls, convective outflow. Re = U_max D/ν,
time in D/U_max, St = f D/U_max with f the frequency of the cross-stream velocity v at the
probe (default 2D behind the rear face on the centre-line). The cylinder's stream function is
set each step from single-valued pressure around it (--body pressure, tridiag.cases.body_pressure) or
held at ψ_in(y_c) (--body fixed). Unsteady runs start with a small vortex blob above the wake
axis (--kick) so that shedding sets in; --steady marches in pseudo-time to a steady residual
and reports the recirculation length L_r/D behind the rear face.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from gpucfd.backend import get_backend
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir

from .channel import HEIGHT, LENGTH, Channel, parse_grid
from .cli import MAX_STEPS, RE_RANGE, add_flow_arguments, check_flow_arguments
from .cylinder_flow import BODY, CFL, CFL_LIMIT, HOST_ARRAYS, MAX_KICK, CylinderFlow, default_dt, field_arrays
from .cylinder_output import CylinderRun, draw_pictures, report, summary, write_results, write_snapshot, write_summary
from .memory import check_fits
from .pictures import summary_then_pictures
from .vorticity import velocity

PROG = "tridiag.cases.cylinder"
DEFAULT_TOL = {"float64": 1e-6, "float32": 1e-3}
DEFAULT_T_END = {"unsteady": 150.0, "steady": 400.0}
DEFAULT_KICK = 0.5


def parse(argv):
    ap = ArgumentParser(
        prog="python -m tridiag.cases.cylinder",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog="Grids are ny x nx cells over 8D x 50D (the paper's 160x800, 200x1000, 400x2000). "
        "Exit codes: 2 bad input, 3 diverged or (--steady) not converged; results are written first.",
    )
    ap.add_argument(
        "--re",
        type=float,
        default=100.0,
        help=f"Reynolds number U_max D / nu ({RE_RANGE[0]:g} to {RE_RANGE[1]:g}; default 100)",
    )
    ap.add_argument("--grid", default="160x800", help="ny x nx cells, e.g. 160x800 (default 160x800)")
    ap.add_argument("--ny", type=int, default=None, help="cells across the channel (overrides --grid)")
    ap.add_argument("--nx", type=int, default=None, help="cells along the channel (overrides --grid)")
    ap.add_argument(
        "--dt",
        type=float,
        default=None,
        help="time step in D/U_max (default --cfl * min(hx, hy), at most Re min(hx, hy)^2)",
    )
    ap.add_argument(
        "--cfl",
        type=float,
        default=None,
        help=f"U_max dt / min(hx, hy) for the default dt (at most {CFL_LIMIT:g}; default {CFL['unsteady']:g}, "
        f"--steady {CFL['steady']:g})",
    )
    ap.add_argument(
        "--t-end",
        type=float,
        default=None,
        help=f"end time in D/U_max (default {DEFAULT_T_END['unsteady']:g}; --steady: the pseudo-time cap, "
        f"default {DEFAULT_T_END['steady']:g})",
    )
    ap.add_argument("--steady", action="store_true", help="march to a steady state (--tol) and report L_r/D")
    ap.add_argument(
        "--tol",
        type=float,
        default=None,
        help="--steady: residual to reach (max norm relative to max|omega|; default 1e-6, 1e-3 in float32)",
    )
    ap.add_argument(
        "--kick",
        type=float,
        default=None,
        help=f"start-up vortex blob strength, 0 for none (at most {MAX_KICK:g}; default {DEFAULT_KICK:g}; --steady 0)",
    )
    ap.add_argument(
        "--body",
        default="pressure",
        help="the cylinder's stream function: pressure (set each step from single-valued pressure around "
        "it, so the flux beside it oscillates) or fixed (psi_in at its centre height, Q/2 when centred); "
        "default pressure",
    )
    ap.add_argument(
        "--probe", default=None, help="probe position X,Y in D (default 2D behind the rear face, on the centre-line)"
    )
    ap.add_argument(
        "--snapshots", type=int, default=1, help="VTU snapshots evenly spaced in time, the last at the end (default 1)"
    )
    add_flow_arguments(ap, "cylinder-out", "step")
    return ap.parse_args(argv)


def check(args) -> tuple:
    """Validated (ny, nx, probe, dtype) from the arguments; InputError naming the first bad one."""
    ny, nx = parse_grid(args.grid)
    ny = ny if args.ny is None else check_range("--ny", args.ny, 16, integer=True)
    nx = nx if args.nx is None else check_range("--nx", args.nx, 50, integer=True)
    dtype = check_flow_arguments(args)
    if args.body not in BODY:
        raise InputError(f"--body must be one of {', '.join(BODY)} (got {args.body!r})")
    check_range("--snapshots", args.snapshots, 1, MAX_STEPS, integer=True)
    for name in ("dt", "t_end"):
        if getattr(args, name) is not None:
            check_range("--" + name.replace("_", "-"), getattr(args, name), 0, low_open=True)
    if args.cfl is not None:
        check_range("--cfl", args.cfl, 0, CFL_LIMIT, low_open=True)
    if args.kick is not None:
        check_range("--kick", args.kick, 0, MAX_KICK)
    probe = None
    if args.probe is not None:
        try:
            probe = tuple(float(p) for p in args.probe.split(","))
        except ValueError:
            probe = ()
        if len(probe) != 2:
            raise InputError(f"--probe must be X,Y in D (got {args.probe!r})")
        check_range("--probe X", probe[0], 0, LENGTH)
        check_range("--probe Y", probe[1], 0, HEIGHT)
    return ny, nx, probe, dtype


def largest_grid(nodes: int) -> str:
    """The largest grid of the paper's shape (nx = 5 ny cells) with at most ``nodes`` nodes."""
    ny = max(0, math.isqrt(nodes // 5) - 1)
    return f"--grid {ny}x{5 * ny}"


def step_count(t_end: float, dt: float, snapshots: int, option: str = "--t-end") -> int:
    """Steps of a run to ``t_end`` (given by ``option``) with steps ``dt`` (at least one); InputError
    beyond MAX_STEPS or below the number of snapshots."""
    if not t_end / dt <= MAX_STEPS:
        raise InputError(
            f"{option} {t_end:g} at dt {dt:g} takes {t_end / dt:.3g} steps, more than {MAX_STEPS:.0e}: "
            f"shorten {option} or take a larger time step"
        )
    steps = max(1, round(t_end / dt))
    if snapshots > steps:
        raise InputError(f"--snapshots must be <= the number of steps, {steps} (got {snapshots})")
    return steps


def main(argv=None) -> int:
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    ny, nx, probe, dtype = check(args)
    mode = "steady" if args.steady else "unsteady"
    channel = Channel.create(ny, nx)
    backend = get_backend(args.device)
    nodes = (ny + 1) * (nx + 1)
    check_fits(
        backend,
        nodes,
        field_arrays(dtype, args.body),
        dtype,
        HOST_ARRAYS,
        f"--grid {ny}x{nx} ({args.dtype})",
        largest_grid,
    )
    dt = args.dt if args.dt is not None else default_dt(channel, args.cfl or CFL[mode], args.re)
    t_end = args.t_end or DEFAULT_T_END[mode]
    steps = step_count(t_end, dt, args.snapshots)
    out = ensure_writable_dir(args.out)
    say = (lambda s: print(s, flush=True)) if not args.quiet else (lambda s: None)
    flow = CylinderFlow(
        backend, channel, args.re, dt, args.solver, args.psi_sweeps, dtype, probe, args.body, layout=args.layout
    )
    kick = (0.0 if args.steady else DEFAULT_KICK) if args.kick is None else args.kick
    flow.kick(kick)
    tol = (args.tol or DEFAULT_TOL[args.dtype]) if args.steady else None
    g = channel.grid
    say(
        f"cylinder Re {args.re:g}: {ny} x {nx} cells (hy = {g.hy:.4g} D, hx = {g.hx:.4g} D), cylinder faces "
        f"x {channel.faces[2]:g}..{channel.faces[3]:g}, y {channel.faces[0]:g}..{channel.faces[1]:g}; "
        f"dt {dt:g}, solver {args.solver}, {args.psi_sweeps} psi sweeps, cylinder psi {args.body}, {args.dtype}, "
        f"{backend.describe()}; "
        + (f"steady, to residual {tol:g} (t <= {t_end:g})" if args.steady else f"to t = {t_end:g} ({steps} steps)")
    )
    mismatch = []

    def progress(f, res, stable):
        mismatch.append([f.t, f.pressure_loop()])
        say(
            f"  t {f.t:8.2f}  step {f.steps:7d}  CFL {stable['cfl']:.2f}  v_probe {f.signal[-1]:+.5f}  "
            f"psi_body {f.body_psi[-1]:.5f}  residual {res['residual']:.2e}  {time.perf_counter() - t_march:.1f} s"
        )

    bounds = [round(steps * k / args.snapshots) for k in range(args.snapshots + 1)]
    snapshots, history, error, result = [], [], None, {"converged": False, "residual": math.nan}
    backend.synchronize()
    t_march = time.perf_counter()
    try:
        for k in range(args.snapshots):
            result = flow.run(bounds[k + 1] - bounds[k], args.check_every, tol, progress)
            history += result["history"]
            if k < args.snapshots - 1 and not result["converged"]:
                snapshots.append(write_snapshot(out, flow, backend))
            if result["converged"]:
                break
    except ConvergenceError as exc:
        error = exc
    backend.synchronize()
    seconds = time.perf_counter() - t_march
    if error is None:
        snapshots.append(write_snapshot(out, flow, backend))
    u, _ = velocity(flow.psi, g, flow.boundary)
    run = CylinderRun(
        re=args.re,
        steady=args.steady,
        body=args.body,
        kick=kick,
        solver=args.solver,
        methods=flow.core.methods,
        psi_sweeps=flow.core.psi_sweeps,
        dtype=args.dtype,
        device=backend.describe(),
        command=" ".join(["python -m tridiag.cases.cylinder", *argv]),
        tol=tol,
        channel=channel,
        dt=flow.dt,
        t=flow.t,
        steps=flow.steps,
        probe=flow.probe_node,
        fields={
            name: backend.to_numpy(f).astype(np.float64)
            for name, f in (("psi", flow.psi), ("omega", flow.omega), ("u", u))
        },
        times=flow.times,
        signal=flow.signal,
        body_psi=flow.body_psi,
        result=result,
        history=history,
        mismatch=mismatch,
        snapshots=snapshots,
        error=error,
        seconds=seconds,
        seconds_total=time.perf_counter() - t_start,
    )
    content = summary(run)
    files = summary_then_pictures(
        write_results(run, out),
        lambda written: write_summary(out, content, written),
        None if args.no_plots else lambda: draw_pictures(run, out, PROG),
    )
    say(report(content))
    if error is not None:
        raise ConvergenceError(f"{error} (results in {out} marked as diverged)", error.reason)
    if args.steady and not content["converged"]:
        raise ConvergenceError(
            f"residual {content['residual']:.2e} > --tol {tol:g} at t = {flow.t:g} "
            f"(raise --t-end; results in {out} marked as not converged)",
            "time cap",
        )
    say(f"wrote {out}/: {', '.join(['summary.json', *files])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog=PROG))
