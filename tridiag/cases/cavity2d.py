"""python -m tridiag.cases.cavity2d: the steady 2D lid-driven cavity by vorticity–stream-function ADI.

The unit square, lid y = 1 moving in +x at speed 1, no-slip walls elsewhere; n × n cells
((n+1)² nodes, h = 1/n; tridiag.cases.cavity2d_problem). Each iteration is one ADI step of the
vorticity transport and ``--psi-sweeps`` ADI sweeps of the stream-function Poisson equation
(tridiag.cases.vorticity_solver), every line solve by tridiag.solve with ``--solver``. The run
stops once the steady residual is <= --tol, or after exactly --iterations steps (timing).
Results (tridiag.cases.cavity2d_output): summary.json, profiles.csv, cavity2d.vtu, then the PNGs.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from gpucfd.backend import get_backend
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir

from .cavity2d_output import CavityRun, draw_pictures, report, write_results, write_summary
from .cavity2d_problem import ARRAYS, HOST_ARRAYS, cavity, default_dt, default_tol, wall_relaxation
from .cli import MAX_STEPS, RE_RANGE, add_flow_arguments, check_flow_arguments
from .memory import check_fits
from .pictures import summary_then_pictures
from .vorticity import velocity

PROG = "tridiag.cases.cavity2d"


def parse(argv):
    ap = ArgumentParser(
        prog="python -m tridiag.cases.cavity2d",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog="Re 100 on 64 x 64 cells takes seconds on a CPU; Re 1000 on 256 x 256 a few minutes "
        "on a GPU. Exit codes: 2 bad input, 3 not converged or diverged (results written and marked).",
    )
    ap.add_argument(
        "--re",
        type=float,
        default=100.0,
        help=f"Reynolds number (lid speed and side 1; {RE_RANGE[0]:g} to {RE_RANGE[1]:g}; default 100)",
    )
    ap.add_argument("--n", type=int, default=64, help="cells per side: (n+1)^2 nodes, h = 1/n (default 64)")
    ap.add_argument(
        "--tol",
        type=float,
        default=None,
        help="steady residual to reach (max-norm, relative to max|omega|; default 1e-6, in float32 "
        "max(1e-4, 1e-7 n^2))",
    )
    ap.add_argument("--max-iterations", type=int, default=200000, help="iteration cap in --tol mode (default 200000)")
    ap.add_argument(
        "--iterations",
        type=int,
        default=0,
        help="run exactly this many iterations whatever the residual (timing mode; default 0: run to --tol)",
    )
    ap.add_argument(
        "--dt", type=float, default=None, help="pseudo time step (default CFL h, CFL = 12 / (Re h) clipped to [2, 8])"
    )
    ap.add_argument(
        "--wall-relaxation",
        type=float,
        default=None,
        help="under-relaxation of the Thom wall vorticity in (0, 1] (default min(1, Re h^2 / dt))",
    )
    add_flow_arguments(ap, "cavity2d-out", "iteration")
    return ap.parse_args(argv)


def check(args) -> np.dtype:
    """The options checked before anything is allocated; returns the field dtype."""
    dtype = check_flow_arguments(args)
    check_range("--n", args.n, 4, integer=True)
    check_range("--iterations", args.iterations, 0, MAX_STEPS, integer=True)
    check_range("--max-iterations", args.max_iterations, 1, MAX_STEPS, integer=True)
    if args.dt is not None:
        check_range("--dt", args.dt, 0, low_open=True)
    if args.wall_relaxation is not None:
        check_range("--wall-relaxation", args.wall_relaxation, 0, 1, low_open=True)
    if not args.iterations:
        check_reachable(args)
    return dtype


def check_reachable(args) -> None:
    """InputError if a steady state cannot be reached within --max-iterations: the lid's flow needs
    about 1/Δt iterations to cross the cavity, and the wall vorticity, under-relaxed by α, about 1/α
    to follow ψ (the default α = Re h²/Δt falls as Δt grows)."""
    h = 1 / args.n
    dt = default_dt(args.re, h) if args.dt is None else args.dt
    alpha = wall_relaxation(dt, args.re, h) if args.wall_relaxation is None else args.wall_relaxation
    cap = f"within --max-iterations {args.max_iterations}"
    if 1 / dt > args.max_iterations:
        raise InputError(
            f"--dt {dt:g} is too small to reach a steady state {cap}: the lid's flow needs about "
            f"1/dt = {1 / dt:.3g} iterations to cross the cavity"
        )
    if 1 / alpha > args.max_iterations:
        given = "" if args.wall_relaxation is None else f" {alpha:g}"
        default = f" (default Re h^2/dt = {alpha:.3g} at dt {dt:g})" if args.wall_relaxation is None else ""
        raise InputError(
            f"--wall-relaxation{given}{default} is too small to reach a steady state {cap}: the wall "
            f"vorticity needs about 1/alpha = {1 / alpha:.3g} iterations to follow the stream function"
        )


def main(argv=None) -> int:
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    dtype = check(args)
    backend = get_backend(args.device)
    check_fits(
        backend,
        (args.n + 1) ** 2,
        ARRAYS,
        dtype,
        HOST_ARRAYS,
        f"--n {args.n} ({args.dtype})",
        lambda nodes: f"--n {math.isqrt(nodes) - 1}",
    )
    out = ensure_writable_dir(args.out)
    tol = default_tol(args.dtype, args.n) if args.tol is None else args.tol
    say = (lambda s: print(s, flush=True)) if not args.quiet else (lambda s: None)
    vs, psi, omega = cavity(
        backend, args.n, args.re, args.dt, args.solver, args.psi_sweeps, args.wall_relaxation, dtype, args.layout
    )
    grid = vs.grid
    fixed_count = args.iterations > 0
    say(
        f"cavity2d Re {args.re:g}: {args.n} x {args.n} cells ({grid.nx} x {grid.ny} nodes), solver {args.solver}, "
        f"dt {vs.dt:g}, wall relaxation {vs.wall_relaxation:.3g}, {args.dtype}, {backend.describe()}; "
        + (f"{args.iterations} iterations" if fixed_count else f"to residual {tol:g}")
    )

    def progress(step, res, stable):
        say(
            f"  iteration {step:7d}  residual {res['residual']:.3e} (psi {res['psi']:.2e}, omega {res['omega']:.2e})"
            f"  {time.perf_counter() - t_march:.1f} s"
        )

    backend.synchronize()
    t_march = time.perf_counter()
    error = None
    try:
        result = vs.march(
            psi,
            omega,
            args.iterations if fixed_count else args.max_iterations,
            None if fixed_count else tol,
            min(args.check_every, args.iterations or args.check_every),
            progress,
        )
    except ConvergenceError as exc:
        error, result = exc, {"steps": None, "converged": False, "residual": float("nan"), "history": []}
    backend.synchronize()
    seconds = time.perf_counter() - t_march
    u, v = velocity(psi, grid, vs.boundary)
    run = CavityRun(
        re=args.re,
        n=args.n,
        solver=args.solver,
        methods=vs.methods,
        dtype=args.dtype,
        device=backend.describe(),
        command=" ".join(["python -m tridiag.cases.cavity2d", *argv]),
        fixed_iterations=fixed_count,
        tol=tol,
        grid=grid,
        dt=vs.dt,
        wall_relaxation=vs.wall_relaxation,
        psi_sweeps=vs.psi_sweeps,
        result=result,
        error=error,
        seconds=seconds,
        fields={
            name: backend.to_numpy(f).astype(np.float64)
            for name, f in (("psi", psi), ("omega", omega), ("u", u), ("v", v))
        },
        seconds_total=time.perf_counter() - t_start,
    )
    files = summary_then_pictures(
        write_results(run, out),
        lambda written: write_summary(run, out, written),
        None if args.no_plots else lambda: draw_pictures(run, out, PROG),
    )
    for line in report(run):
        say(line)
    if error is not None:
        raise ConvergenceError(f"{error} (results in {out} marked as not converged)", error.reason)
    if not fixed_count and not run.converged:
        raise ConvergenceError(
            f"residual {result['residual']:.2e} > --tol {tol:g} after {result['steps']} iterations "
            f"(results in {out} marked as not converged)",
            "iteration cap",
        )
    say(f"wrote {out}/: {', '.join(['summary.json', *files])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog=PROG))
