"""Heat conduction in a square on the batched tridiagonal solvers, CPU or GPU.

  python -m tridiag.heat unsteady --n 1024 --steps 100 --solver auto --sweep transpose --dtype float32
  python -m tridiag.heat steady --n 256 --solver checkerboard --dop 8

unsteady: Peaceman–Rachford ADI for ∂T/∂t = ∇²T (Wei et al. 2013: Δx = Δt = 0.01, edges at
0), starting from the hot plate sin(πx/L) sin(πy/L), checked against its exact decay.
steady: ADI iteration for ∇²T = 0 (Zolfaghari 2018: edge y = 1 at T1, the others at 0),
centre temperature and centre line against the series solution.
Grid: n × n nodes including the edges (tridiagonal systems of n rows, edge rows fixed).
Checkerboard takes any dop <= n: when dop does not divide n the last piece is shorter.
Results in --out: summary.json, centreline.csv, field.png, profile.png.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import tridiag
from fem3d.backend import DEVICES, DTYPES, get_backend, resolve_dtype
from fem3d.errors import ArgumentParser, ConvergenceError, check_range, run_cli
from fem3d.output import ensure_writable_dir, write_csv, write_json

from . import heat_output
from .adi import SWEEPS
from .heat_exact import steady_series
from .heat_steady import PARAMETERS, STOPS, centre, solve_steady
from .heat_unsteady import initial_field, relative_l2, run_unsteady, serial_cpu_run

MEMORIES = ("shared", "global")


def parse(argv):
    p = ArgumentParser(prog="python -m tridiag.heat", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="case", required=True)
    un = sub.add_parser("unsteady", help="transient conduction, Peaceman–Rachford ADI (Wei et al. 2013)",
                        description="Square [0, L]² of n × n nodes (edges included), L = (n-1) dx, edges at 0, "
                                    "start T = sin(πx/L) sin(πy/L) (exact decay known), r = dt/dx² (alpha = 1).")
    st = sub.add_parser("steady", help="steady conduction by the ADI iteration (Zolfaghari 2018)",
                        description="Unit square of n × n nodes (edges included, h = 1/(n-1)); edge y = 1 at T1, "
                                    "the others at 0. T_centre: the middle node (n odd) or the mean of the four "
                                    "nodes around (1/2, 1/2) (n even). Checkerboard: dop need not divide n (the "
                                    "last piece of each line is shorter).")
    for q, n, dtype in ((un, 1024, "float32"), (st, 256, "float64")):
        q.add_argument("--n", type=int, default=n, help=f"nodes per side, edges included (>= 3; default {n})")
        q.add_argument("--solver", choices=tridiag.METHODS, default="auto" if q is un else "thomas",
                       help="tridiag.solve method for the line solves")
        q.add_argument("--sweep", choices=SWEEPS, default="strided",
                       help="y-lines along axis 0 of the field (strided) or on a transposed copy (transpose)")
        q.add_argument("--dtype", choices=tuple(DTYPES), default=dtype)
        q.add_argument("--device", choices=DEVICES, default="auto")
        q.add_argument("--dop", type=int, default=8, help="checkerboard: rows per piece (1..n; default 8)")
        q.add_argument("--memory", choices=MEMORIES, default=None,
                       help="checkerboard: pieces in shared (dop <= 32) or global memory")
        q.add_argument("--out", default=f"heat-{'unsteady' if q is un else 'steady'}", help="result folder")
    un.add_argument("--steps", type=int, default=100, help="time steps (>= 0; default 100)")
    un.add_argument("--dx", type=float, default=0.01, help="node spacing Δx = Δy (> 0; default 0.01)")
    un.add_argument("--dt", type=float, default=0.01, help="time step Δt (> 0; default 0.01)")
    un.add_argument("--compare-cpu", action="store_true",
                    help="repeat the run on the CPU (NumPy, same dtype) and report eq. 10 of Wei et al.")
    st.add_argument("--parameters", choices=("auto",) + PARAMETERS, default="auto",
                    help="ADI parameters: paper (ρ = 2, eqs. 3-4), optimal (one ρ), cyclic (geometric "
                         "cycle); auto: cyclic, or optimal for checkerboard (its inner iterations grow "
                         "with 1/ρ)")
    st.add_argument("--stop", choices=STOPS, default="residual",
                    help="paper: eq. 5, sum (Tk - Tk-1)^2 < 1e-6; residual: bound on the iteration error <= tol T1")
    st.add_argument("--tol", type=float, default=1e-9, help="residual rule: relative error bound (> 0)")
    st.add_argument("--maxiter", type=int, default=100000, help="ADI iteration cap (>= 1)")
    st.add_argument("--t1", type=float, default=100.0, help="temperature of the edge y = 1 (default 100)")
    st.add_argument("--inner-tol", type=float, default=1e-4,
                    help="checkerboard: relative tolerance of each line solve (> 0; default 1e-4; the solves "
                         "deliver the increment, which vanishes at convergence, so this does not limit the "
                         "final accuracy)")
    return p.parse_args(argv)


def _options(args) -> dict:
    check_range("--n", args.n, 3, integer=True)
    if args.solver != "checkerboard":
        return {}
    check_range("--dop", args.dop, 1, args.n, integer=True)
    opts = {"dop": args.dop, "maxiter": 1000000}
    if args.case == "steady":
        opts["tol"] = check_range("--inner-tol", args.inner_tol, 0, low_open=True)
    if args.memory:
        opts["memory"] = args.memory
    return opts


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(k: int, change: float, bound: float) -> None:
    _say(f"  it {k:7d}  sum dT^2 {change:.3e}  error bound {bound:.3e} T1")


def unsteady(args, xp, options, out) -> dict:
    check_range("--steps", args.steps, 0, integer=True)
    check_range("--dx", args.dx, 0, low_open=True)
    check_range("--dt", args.dt, 0, low_open=True)
    dtype = resolve_dtype(args.dtype)
    _say(f"unsteady ADI: {args.n}^2 nodes, {args.steps} steps, r = {args.dt / args.dx ** 2:g}, solver {args.solver}, "
         f"sweep {args.sweep}, {args.dtype}")
    res = run_unsteady(xp, args.n, args.steps, dtype, args.solver, args.sweep, args.dx, args.dt, options=options)
    field, exact = res.pop("field"), res.pop("exact")
    _say(f"  {res['seconds']:.3f} s ({res['ms_per_step'] or 0:.3f} ms/step); relative L2 error vs exact "
         f"{res['error_exact']:.3e}, vs the semi-discrete exact {res['error_semi_discrete']:.3e}")
    if args.compare_cpu:
        t0 = time.perf_counter()
        cpu = serial_cpu_run(initial_field(np, args.n, dtype, args.dx), args.steps, res["r"] / 2)
        res["cpu_seconds"] = time.perf_counter() - t0
        res["eq10_vs_cpu"] = relative_l2(field, cpu)
        _say(f"  eq. 10 against the serial CPU ADI: {res['eq10_vs_cpu']:.3e}; CPU {res['cpu_seconds']:.2f} s")
    j = args.n // 2
    x = np.arange(args.n) * args.dx
    write_csv(os.path.join(out, "centreline.csv"), ("x", "T", "T_exact"), zip(x, field[j], exact[j]))
    title = f"ADI {args.n}² {args.solver}/{args.sweep} {args.dtype}, t = {res['t_end']:g}"
    heat_output.field_png(os.path.join(out, "field.png"), field, res["length"], title)
    heat_output.profile_png(os.path.join(out, "profile.png"), x, field[j], exact[j], "x",
                            f"T(x, y = {x[j]:g})", title)
    return res


def steady(args, xp, options, out) -> dict:
    check_range("--tol", args.tol, 0, low_open=True)
    check_range("--maxiter", args.maxiter, 1, integer=True)
    params = args.parameters
    if params == "auto":
        params = "optimal" if args.solver == "checkerboard" else "cyclic"
    _say(f"steady ADI iteration: {args.n}^2 nodes, solver {args.solver}, parameters {params}, stop {args.stop}")
    try:
        res = solve_steady(xp, args.n, resolve_dtype(args.dtype), args.solver, args.sweep, params, args.stop, args.tol,
                           args.maxiter, args.t1, options, _progress)
        error = None
    except ConvergenceError as exc:
        res, error = exc.result, exc
    field = res.pop("field")
    _say(f"  {res['iterations']} iterations in {res['seconds']:.2f} s; T_centre {res['t_centre']:.10f} "
         f"(exact {args.t1 / 4:g}, error {res['centre_error']:.3e})")
    y = np.linspace(0, 1, args.n)
    m = args.n // 2
    line = field[:, m] if args.n % 2 else field[:, m - 1:m + 1].mean(axis=1)
    exact = steady_series(0.5, np.minimum(y, 1 - 1e-12), args.t1, terms=max(2000, 6 * args.n))
    exact[-1] = args.t1
    res["centreline_max_error"] = float(np.abs(line - exact)[1:-1].max())
    res["t_centre_series"] = float(steady_series(0.5, 0.5, args.t1, terms=50))
    _say(f"  centre line x = 1/2: max |T - series| = {res['centreline_max_error']:.3e}")
    write_csv(os.path.join(out, "centreline.csv"), ("y", "T", "T_series"), zip(y, line, exact))
    title = f"steady {args.n}² {args.solver} ({params}, stop {args.stop}), T_c = {centre(field):.6f}"
    heat_output.field_png(os.path.join(out, "field.png"), field, 1.0, title)
    heat_output.profile_png(os.path.join(out, "profile.png"), y, line, exact, "y", "T(1/2, y)", title)
    res["error"] = None if error is None else str(error)
    if error is not None:
        write_json(os.path.join(out, "summary.json"), res)
        raise error
    return res


def main(argv=None) -> int:
    args = parse(argv)
    options = _options(args)
    backend = get_backend(args.device)
    out = ensure_writable_dir(args.out)
    res = (unsteady if args.case == "unsteady" else steady)(args, backend.xp, options, out)
    res.update(device=backend.describe(), command="python -m tridiag.heat " + " ".join(sys.argv[1:] if argv is None
                                                                                      else argv))
    write_json(os.path.join(out, "summary.json"), res)
    _say(f"results in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="python -m tridiag.heat"))
