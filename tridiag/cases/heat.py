"""Heat conduction in a square on the batched tridiagonal solvers, CPU or GPU.

  python -m tridiag.cases.heat unsteady --n 1024 --steps 100 --solver hybrid --layout contiguous --dtype float32
  python -m tridiag.cases.heat steady --n 256 --solver checkerboard --dop 8

unsteady: Peaceman–Rachford ADI for ∂T/∂t = ∇²T (Wei et al. 2013: Δx = Δt = 0.01, edges at
0), starting from the hot plate sin(πx/L) sin(πy/L), checked against its exact decay.
steady: ADI iteration for ∇²T = 0 (Zolfaghari 2018: edge y = 1 at T1, the others at 0),
centre temperature and centre line against the series solution.
Both run Peaceman–Rachford double sweeps (tridiag.cases.peaceman_rachford) by the line solver
--solver in the storage --layout (tridiag.cases.line_solver, as the flow commands).
Grid: n × n nodes including the edges (tridiagonal systems of n rows, edge rows fixed).
Checkerboard takes any dop <= n: when dop does not divide n the last piece is shorter.
Results in --out (tridiag.cases.heat_output): summary.json, centreline.csv, then field.png, profile.png.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from gpucfd.backend import DEVICES, DTYPES, Backend, get_backend, resolve_dtype
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir

from .cli import MAX_STEPS, add_line_solver_arguments, check_tolerance
from .heat_exact import steady_series
from .heat_output import HeatRun, draw_pictures, write_results
from .heat_steady import PARAMETERS, STOPS, centre, parameters, solve_steady
from .heat_unsteady import initial_field, relative_l2, run_unsteady, serial_cpu_run
from .line_solver import check_solver
from .memory import check_fits

PROG = "tridiag.cases.heat"
MEMORIES = ("shared", "global")
SPACING = (1e-30, 1e30)  # --dx and --dt: (n - 1) dx and dt / dx² stay far inside float64's range
T1_RANGE = (1e-6, 1e6)  # --t1: squared changes of the field stay far inside float32's range
SOLVE_ARRAYS = 26  # n x n arrays of the field dtype besides 2 per ADI parameter: field, increments, line solver work
HOST_ARRAYS = {"unsteady": 5, "steady": 2, "compare-cpu": 8}  # float64 n x n arrays of the results on the host


def parse(argv):
    p = ArgumentParser(
        prog="python -m tridiag.cases.heat", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="case", required=True)
    un = sub.add_parser(
        "unsteady",
        help="transient conduction, Peaceman–Rachford ADI (Wei et al. 2013)",
        description="Square [0, L]² of n × n nodes (edges included), L = (n-1) dx, edges at 0, "
        "start T = sin(πx/L) sin(πy/L) (exact decay known), r = dt/dx² (alpha = 1).",
    )
    st = sub.add_parser(
        "steady",
        help="steady conduction by the ADI iteration (Zolfaghari 2018)",
        description="Unit square of n × n nodes (edges included, h = 1/(n-1)); edge y = 1 at T1, "
        "the others at 0. T_centre: the middle node (n odd) or the mean of the four "
        "nodes around (1/2, 1/2) (n even). Checkerboard: dop need not divide n (the "
        "last piece of each line is shorter).",
    )
    for q, n, dtype in ((un, 1024, "float32"), (st, 256, "float64")):
        q.add_argument("--n", type=int, default=n, help=f"nodes per side, edges included (>= 3; default {n})")
        add_line_solver_arguments(q, "auto")
        q.add_argument("--dtype", choices=tuple(DTYPES), default=dtype)
        q.add_argument("--device", choices=DEVICES, default="auto")
        q.add_argument("--dop", type=int, default=8, help="checkerboard: rows per piece (1..n; default 8)")
        q.add_argument(
            "--memory",
            choices=MEMORIES,
            default=None,
            help="checkerboard: pieces in shared (dop <= 32) or global memory",
        )
        q.add_argument("--out", default=f"heat-{'unsteady' if q is un else 'steady'}", help="result folder")
    un.add_argument("--steps", type=int, default=100, help=f"time steps (0 to {MAX_STEPS}; default 100)")
    un.add_argument(
        "--dx", type=float, default=0.01, help=f"node spacing Δx = Δy ({SPACING[0]:g} to {SPACING[1]:g}; default 0.01)"
    )
    un.add_argument(
        "--dt", type=float, default=0.01, help=f"time step Δt ({SPACING[0]:g} to {SPACING[1]:g}; default 0.01)"
    )
    un.add_argument(
        "--compare-cpu",
        action="store_true",
        help="repeat the run on the CPU (NumPy, same dtype) and report eq. 10 of Wei et al.",
    )
    st.add_argument(
        "--parameters",
        choices=("auto",) + PARAMETERS,
        default="auto",
        help="ADI parameters: paper (ρ = 2, eqs. 3-4), optimal (one ρ), cyclic (geometric "
        "cycle); auto: cyclic, or optimal for checkerboard (its inner iterations grow "
        "with 1/ρ)",
    )
    st.add_argument(
        "--stop",
        choices=STOPS,
        default="residual",
        help="paper: eq. 5, sum (Tk - Tk-1)^2 < 1e-6; residual: bound on the iteration error <= tol T1",
    )
    st.add_argument(
        "--tol", type=float, default=1e-9, help="residual rule: relative error bound (0 < tol < 1; default 1e-9)"
    )
    st.add_argument("--maxiter", type=int, default=100000, help=f"ADI iteration cap (1 to {MAX_STEPS}; default 100000)")
    st.add_argument(
        "--check-every",
        type=int,
        default=10,
        help=f"iterations between tests of the stopping rule (1 to {MAX_STEPS}; default 10; 1 reproduces "
        "the paper's iteration counts with --stop paper)",
    )
    st.add_argument(
        "--t1",
        type=float,
        default=100.0,
        help=f"temperature of the edge y = 1 ({T1_RANGE[0]:g} to {T1_RANGE[1]:g}; default 100)",
    )
    st.add_argument(
        "--inner-tol",
        type=float,
        default=1e-4,
        help="checkerboard: relative tolerance of each line solve (0 < tol < 1; default 1e-4; the solves "
        "deliver the increment, which vanishes at convergence, so this does not limit the "
        "final accuracy)",
    )
    return p.parse_args(argv)


def check(args) -> dict:
    """The options checked before anything is allocated; returns the checkerboard options."""
    check_range("--n", args.n, 3, integer=True)
    check_solver(args.solver, args.layout, iterative=True)
    resolve_dtype(args.dtype)
    if args.case == "unsteady":
        check_range("--steps", args.steps, 0, MAX_STEPS, integer=True)
        check_range("--dx", args.dx, *SPACING)
        check_range("--dt", args.dt, *SPACING)
        check_decay(args.n, args.steps, args.dx, args.dt)
    else:
        check_tolerance("--tol", args.tol)
        check_range("--maxiter", args.maxiter, 1, MAX_STEPS, integer=True)
        check_range("--check-every", args.check_every, 1, MAX_STEPS, integer=True)
        check_range("--t1", args.t1, *T1_RANGE)
        check_tolerance("--inner-tol", args.inner_tol)
    checkerboard = args.solver == "checkerboard"
    check_range("--dop", args.dop, 1, args.n if checkerboard else None, integer=True)
    if not checkerboard:
        return {}
    opts = {"dop": args.dop, "maxiter": 1000000}
    if args.case == "steady":
        opts["tol"] = args.inner_tol
    if args.memory:
        opts["memory"] = args.memory
    return opts


def check_decay(n: int, steps: int, dx: float, dt: float) -> None:
    """InputError if the hot plate's exact amplitude exp(-2π² t / L²) at t = steps dt, L = (n - 1) dx,
    falls out of float64's normal range (with full precision), where its errors could not be measured."""
    length = (n - 1) * dx
    decay = 2 * math.pi**2 * steps * dt / length**2
    limit = math.log(np.finfo(np.float64).eps / np.finfo(np.float64).tiny)
    if decay > limit:
        raise InputError(
            f"by t = {steps * dt:g} ({steps} steps of dt {dt:g}) the hot plate on the {length:g}-wide square "
            f"({n}² nodes, dx {dx:g}) decays by exp(-{decay:.3g}), beyond float64's range "
            f"(exp(-{limit:.0f})), so its errors cannot be measured: take fewer or shorter steps or a "
            "larger square"
        )


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(k: int, change: float, bound: float) -> None:
    _say(f"  it {k:7d}  sum dT^2 {change:.3e}  error bound {bound:.3e} T1")


def unsteady(args, backend: Backend, options) -> HeatRun:
    """Run the unsteady case; its record (centre line y = y_{n/2} against the exact decay)."""
    dtype = resolve_dtype(args.dtype)
    _say(
        f"unsteady ADI: {args.n}^2 nodes, {args.steps} steps, r = {args.dt / args.dx**2:g}, solver {args.solver}, "
        f"layout {args.layout}, {args.dtype}"
    )
    res = run_unsteady(backend, args.n, args.steps, dtype, args.solver, args.layout, args.dx, args.dt, options=options)
    _say(f"  solved by {res['solved_by']}")
    field, exact = res.pop("field"), res.pop("exact")
    _say(
        f"  {res['seconds']:.3f} s ({res['ms_per_step'] or 0:.3f} ms/step); relative L2 error vs exact "
        f"{res['error_exact']:.3e}, vs the semi-discrete exact {res['error_semi_discrete']:.3e}"
    )
    if args.compare_cpu:
        t0 = time.perf_counter()
        cpu = serial_cpu_run(initial_field(np, args.n, dtype, args.dx), args.steps, res["r"])
        res["cpu_seconds"] = time.perf_counter() - t0
        res["eq10_vs_cpu"] = relative_l2(field, cpu)
        _say(f"  eq. 10 against the serial CPU ADI: {res['eq10_vs_cpu']:.3e}; CPU {res['cpu_seconds']:.2f} s")
    j = args.n // 2
    x = np.arange(args.n) * args.dx
    return HeatRun(
        summary=res,
        field=field,
        line=("x", x, field[j], exact[j]),
        reference="T_exact",
        label=f"T(x, y = {x[j]:g})",
        length=res["length"],
        title=f"ADI {args.n}² {args.solver} {args.dtype}, t = {res['t_end']:g}",
    )


def _parameters(args) -> str:
    """The ADI parameter rule of the steady case (--parameters, auto resolved)."""
    if args.parameters != "auto":
        return args.parameters
    return "optimal" if args.solver == "checkerboard" else "cyclic"


def steady(args, backend: Backend, options) -> HeatRun:
    """Run the steady case; its record (centre line x = 1/2 against the series), with the
    ConvergenceError that stopped it (the caller raises it after the output)."""
    params = _parameters(args)
    _say(f"steady ADI iteration: {args.n}^2 nodes, solver {args.solver}, parameters {params}, stop {args.stop}")
    try:
        res = solve_steady(
            backend,
            args.n,
            resolve_dtype(args.dtype),
            args.solver,
            args.layout,
            params,
            args.stop,
            args.tol,
            args.maxiter,
            args.t1,
            options,
            _progress,
            args.check_every,
        )
        error = None
    except ConvergenceError as exc:
        res, error = exc.result, exc
    field = res.pop("field")
    _say(
        f"  {res['iterations']} iterations in {res['seconds']:.2f} s; T_centre {res['t_centre']:.10f} "
        f"(exact {args.t1 / 4:g}, error {res['centre_error']:.3e})"
    )
    y = np.linspace(0, 1, args.n)
    m = args.n // 2
    line = field[:, m] if args.n % 2 else field[:, m - 1 : m + 1].mean(axis=1)
    exact = steady_series(0.5, np.minimum(y, 1 - 1e-12), args.t1, terms=max(2000, 6 * args.n))
    exact[-1] = args.t1
    res["centreline_max_error"] = float(np.abs(line - exact)[1:-1].max())
    res["t_centre_series"] = float(steady_series(0.5, 0.5, args.t1, terms=50))
    _say(f"  centre line x = 1/2: max |T - series| = {res['centreline_max_error']:.3e}")
    res["error"] = None if error is None else str(error)
    return HeatRun(
        summary=res,
        field=field,
        line=("y", y, line, exact),
        reference="T_series",
        label="T(1/2, y)",
        length=1.0,
        title=f"steady {args.n}² {args.solver} ({params}, stop {args.stop}), T_c = {centre(field):.6f}",
        error=error,
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    options = check(args)
    backend = get_backend(args.device)
    count = 1 if args.case == "unsteady" else len(parameters(_parameters(args), args.n))
    host = HOST_ARRAYS[args.case] + (HOST_ARRAYS["compare-cpu"] if args.case == "unsteady" and args.compare_cpu else 0)
    check_fits(
        backend,
        args.n**2,
        SOLVE_ARRAYS + 2 * count,
        resolve_dtype(args.dtype),
        host,
        f"--n {args.n} ({args.dtype})",
        lambda nodes: f"--n {math.isqrt(nodes)}",
    )
    out = ensure_writable_dir(args.out)
    run = (unsteady if args.case == "unsteady" else steady)(args, backend, options)
    run.summary.update(device=backend.describe(), command="python -m tridiag.cases.heat " + " ".join(argv))
    write_results(run, out)
    draw_pictures(run, out, PROG)
    if run.error is not None:
        raise run.error
    _say(f"results in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog=PROG))
