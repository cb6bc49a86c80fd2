"""Convergence study against exact solutions: ``python -m fem3d.verify``.

Solves the paper's analytic flow (Kao & Sheu 2018, section 5.1) and a smooth
manufactured flow with body force (fem3d.problems.exact) on N^3 unit-cube meshes, and prints
the L2 errors of u, v, w, p with their convergence rates, like the paper's Table 2.
Results go to a JSON file, rewritten atomically after every mesh size, so that a
failure loses only the run it stopped. Exit code 0 when every run converged; 3 otherwise,
with one line on stderr naming the runs that did not. Runs
under MPI as well (``mpirun -n 4 python -m fem3d.verify``), one GPU per rank.

The manufactured flow runs at Re = 10 by default: at Re = 100 its symmetric steady
solution repels the Picard iteration (a mode seeded by round-off grows about 2x per
step once the error is near 1e-9, with or without upwinding), so Picard cannot
converge there; Newton's method would be needed.
"""

from __future__ import annotations

import math
import signal
import sys
import time

import numpy as np

from .commands.cli import add_solver_arguments, linear_options, nonlinear_options
from .parallel.comm import agreed_errors
from .problems.distributed import add_parallel_arguments, start
from gpucfd.errors import ArgumentParser, ConvergenceError, check_range, run_cli
from .problems.exact import CASES
from .discretisation.fields import l2_errors
from .parallel.interrupt import agreed, graceful_stop
from .problems.memory import check_fits
from .discretisation.mesh import box_mesh
from .problems.navier_stokes import FlowProblem
from .problems.flow import Flow
from .problems.simulation import Simulation
from .solvers.nonlinear import NonlinearOptions
from gpucfd.output import check_writable_file, write_json
from .solvers.linear import LinearOptions

# Kao & Sheu 2018, Table 2 (analytic case), L2 error norms at N^3 elements.
PAPER_TABLE2 = {
    10: {"u": 6.80e-4, "v": 3.59e-3, "w": 3.65e-3, "p": 2.75e-3},
    20: {"u": 1.08e-4, "v": 4.99e-4, "w": 5.71e-4, "p": 7.04e-4},
    30: {"u": 4.37e-5, "v": 1.39e-4, "w": 1.53e-4, "p": 3.18e-4},
    40: {"u": 2.42e-5, "v": 5.56e-5, "w": 5.85e-5, "p": 1.94e-4},
}
FIELDS = ("u", "v", "w", "p")


def simulation(case, n: int, backend, comm, nonlinear: NonlinearOptions, linear: LinearOptions, started=None):
    """The run of ``case`` on an n^3 unit cube (on every rank of ``comm``), checked: its flow
    posed, the solver for the mesh and its partition (collective)."""
    mesh = box_mesh(n)

    def problem_on(m):
        return FlowProblem.with_boundary_velocity(m, case.re, lambda x: case.velocity(np, x), force=case.force)

    flow = Flow.posed(mesh, case.re, problem_on)
    return Simulation(flow, backend, comm, nonlinear, linear, started=started)


def run_case(case, n: int, backend, comm, nonlinear: NonlinearOptions, linear: LinearOptions, log=None) -> dict:
    """Solve ``case`` on an n^3 unit cube (on every rank of ``comm``); returns a row of
    the convergence table."""
    t0 = time.perf_counter()
    with agreed_errors(comm):
        run = simulation(case, n, backend, comm, nonlinear, linear, started=t0)
    result = run.run(log=log)
    errors = l2_errors(
        backend,
        result.part.mesh,
        backend.asarray(result.x_local),
        case.velocity,
        case.pressure,
        total=result.part.dist.allreduce,
    )
    steps = result.steps
    return {
        "case": case.name,
        "re": case.re,
        "n": n,
        "elements": run.flow.mesh.n_elements,
        "dofs": run.flow.mesh.n_dofs,
        "errors": errors,
        "converged": result.converged,
        "reason": result.reason,
        "residual": result.residual,
        "solver": run.linear.solver,
        "nonlinear_steps": len(steps),
        "linear_iterations": sum(s["linear_iterations"] for s in steps),
        "seconds": time.perf_counter() - t0,
        "times": result.system.timer.as_dict(),
    }


def add_rates(rows: list) -> None:
    """rates[f] = log(e_prev / e) / log(n / n_prev) between consecutive rows of one case."""
    for prev, row in zip(rows, rows[1:]):
        row["rates"] = {
            f: math.log(prev["errors"][f] / row["errors"][f]) / math.log(row["n"] / prev["n"]) for f in FIELDS
        }


def format_table(rows: list) -> str:
    head = (
        f"{'N':>4} {'DOFs':>10} "
        + " ".join(f"{'L2 ' + f:>9} {'rate':>5}" for f in FIELDS)
        + f" {'steps':>6} {'lin its':>7} {'time s':>8}"
    )
    lines = [head]
    for r in rows:
        cells = []
        for f in FIELDS:
            rate = r.get("rates", {}).get(f)
            cells.append(
                f"{r['errors'][f]:9.3e} {rate:5.2f}" if rate is not None else f"{r['errors'][f]:9.3e} {'-':>5}"
            )
        flag = "" if r["converged"] else f"  NOT CONVERGED ({r['reason']})"
        lines.append(
            f"{r['n']:4d} {r['dofs']:10d} "
            + " ".join(cells)
            + f" {r['nonlinear_steps']:6d} {r['linear_iterations']:7d} {r['seconds']:8.1f}{flag}"
        )
        if r["case"] == "paper" and r["n"] in PAPER_TABLE2:
            ref = PAPER_TABLE2[r["n"]]
            lines.append(
                f"{'':>4} {'paper':>10} "
                + " ".join(f"{ref[f]:9.3e} {'<=' if r['errors'][f] <= ref[f] else '>':>5}" for f in FIELDS)
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m fem3d.verify", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--case", choices=["paper", "manufactured", "both"], default="both", help="which exact solution (default both)"
    )
    ap.add_argument(
        "--n", type=int, nargs="+", default=[2, 4, 8], help="elements per side of the unit cube (default 2 4 8)"
    )
    ap.add_argument(
        "--re", type=float, default=None, help="Reynolds number (default: 100 for paper, 10 for manufactured)"
    )
    ap.add_argument("--out", default="verify.json", help="JSON results file (default verify.json)")
    ap.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    add_solver_arguments(ap, tol=1e-10)  # algebraic error well below the discretisation error at N = 40
    add_parallel_arguments(ap)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    backend, comm = start(args, argv)
    root = comm.rank == 0
    with agreed_errors(comm):
        if args.re is not None:
            check_range("--re", args.re, low=0, low_open=True)
        nonlinear, linear = nonlinear_options(args), linear_options(args)
        for n in args.n:
            check_range("--n", n, low=1, high=10**4, integer=True)
            check_fits(
                backend,
                linear.matrix_dtype,
                linear.solver,
                n**3,
                comm.size,
                lambda e: f"--n {int(e ** (1 / 3))} fits at most",
                linear.assembly,
                whole_mesh=0.0,  # boxes: each rank builds its part alone
            )
        check_writable_file(args.out)
        names = ["paper", "manufactured"] if args.case == "both" else [args.case]
        cases = [CASES[name](args.re if args.re is not None else CASES[name].default_re) for name in names]
        for n in sorted(set(args.n)):  # every mesh posed and partitioned before the first solve
            simulation(cases[0], n, backend, comm, nonlinear, linear)
    say = (lambda s: print(s, flush=True)) if root else (lambda s: None)
    log = None if args.quiet or not root else (lambda s: say("  " + s))
    ranks = f" on {comm.size} ranks ({comm.name})" if comm.size > 1 else ""
    report = {"device": backend.describe(), "ranks": comm.size, "options": vars(args), "cases": {}}
    failed = []
    with graceful_stop():
        for name, case in zip(names, cases):
            say(f"case {name}, Re {case.re:g}, {backend.describe()}{ranks}")
            rows = report["cases"][name] = []
            for n in sorted(set(args.n)):
                rows.append(run_case(case, n, backend, comm, nonlinear, linear, log))
                if not rows[-1]["converged"]:
                    failed.append(rows[-1])
                add_rates(rows)
                if root:
                    write_json(args.out, report)
                if rows[-1]["reason"].startswith("interrupted"):
                    break
            say(format_table(rows))
            if failed and failed[-1]["reason"].startswith("interrupted"):
                break
        signum = agreed(comm)
    say(f"wrote {args.out}")
    if failed and failed[-1]["reason"].startswith("interrupted"):
        r = failed[-1]
        if root:
            print(
                f"fem3d.verify: {r['reason']} in case {r['case']} N={r['n']}; rows so far in {args.out}",
                file=sys.stderr,
                flush=True,
            )
        return 128 + (signum or signal.SIGINT)
    if failed:
        runs = ", ".join(f"case {r['case']} N={r['n']} (Re {r['re']:g})" for r in failed)
        raise ConvergenceError(f"{runs}; results in {args.out} are marked", failed[0]["reason"])
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="fem3d.verify"))
