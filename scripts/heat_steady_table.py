"""Steady heat conduction (Zolfaghari 2018): Table 1 (centre temperature) and the dop study.

Table 1: for each n², a Thomas solver (tridiag "pta", one thread per line, on the GPU; the
NumPy "thomas" on the CPU) and checkerboard (dop 8), under the paper's settings (ρ = 2,
eq. 5 stopping rule; capped at --paper-maxiter iterations) and converged (the default
parameters of tridiag.cases.heat steady, residual rule with --tol; checkerboard line solves to a
relative 1e-4): T_centre, |T_centre - 25|,
iterations, checkerboard iterations, seconds, and the largest checkerboard - Thomas
difference over the field. dop study (like the paper's Fig. 6): converged checkerboard on
--dop-n² for each dop and memory variant. Writes heat_steady<tag>.json/.md.

  python scripts/heat_steady_table.py --device gpu                                   # device
  python scripts/heat_steady_table.py --sizes 32 --dop-n 32 --dops 4 8 --device cpu --tag _cpu
"""

from __future__ import annotations

import datetime
import json
import math
import sys
from pathlib import Path

import numpy as np

from gpucfd.backend import get_backend
from gpucfd.errors import ArgumentParser, ConvergenceError, check_range, run_cli
from gpucfd.output import ensure_writable_dir
from script_options import check_each, check_tag
from tridiag.cases.cli import MAX_STEPS, check_tolerance
from tridiag.cases.heat import SOLVE_ARRAYS
from tridiag.cases.heat_steady import parameters, solve_steady
from tridiag.cases.memory import check_fits

SIZES = (128, 256, 512, 1024)
DOPS = (4, 8, 16, 32)
CB_OPTIONS = {"maxiter": 1000000, "tol": 1e-4}  # per line solve (tridiag.cases.heat steady's --inner-tol)


def run(backend, n, solver, params, stop, tol, maxiter, options):
    try:
        return solve_steady(
            backend, n, np.float64, solver, "natural", params, stop, tol, maxiter, options=options, check_every=1
        )
    except ConvergenceError as exc:
        return exc.result


def row_of(label, res):
    keep = (
        "n",
        "solver",
        "parameters",
        "stop",
        "iterations",
        "inner_iterations",
        "seconds",
        "converged",
        "t_centre",
        "centre_error",
        "error_bound",
        "options",
    )
    return dict(setting=label, **{k: res[k] for k in keep})


def main(argv=None):
    p = ArgumentParser(prog="scripts/heat_steady_table.py", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="Table 1 grids (none: no table)")
    p.add_argument("--dops", type=int, nargs="*", default=list(DOPS), help="dop study (none: no study)")
    p.add_argument("--dop-n", type=int, default=512, help="grid of the dop study")
    p.add_argument("--tol", type=float, default=1e-9)
    p.add_argument("--paper-maxiter", type=int, default=7000, help="cap of the paper's setting (128²: 6583)")
    p.add_argument("--maxiter", type=int, default=100000)
    p.add_argument("--device", default="gpu", help="gpu (default), cpu or auto")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    for n in args.sizes:
        check_range("--sizes", n, 8, integer=True)  # the table's checkerboard runs pieces of 8 rows
    check_range("--dop-n", args.dop_n, 3, integer=True)
    if args.dops:
        check_each("--dops", args.dops, 1, args.dop_n, integer=True)
    check_tolerance("--tol", args.tol)
    check_range("--paper-maxiter", args.paper_maxiter, 1, MAX_STEPS, integer=True)
    check_range("--maxiter", args.maxiter, 1, MAX_STEPS, integer=True)
    check_tag(args.tag)
    backend = get_backend(args.device)
    largest = max([*args.sizes, args.dop_n if args.dops else 3])
    check_fits(
        backend,
        largest**2,
        SOLVE_ARRAYS + 2 * len(parameters("cyclic", largest)),
        np.float64,
        2,
        f"a {largest}² grid",
        lambda nodes: f"a {math.isqrt(nodes)}² grid",
    )
    ensure_writable_dir(args.out)
    thomas = "pta" if backend.is_gpu else "thomas"
    print(backend.describe(), flush=True)
    table = []
    settings = (
        ("paper (rho = 2, eq. 5)", "paper", "paper", args.paper_maxiter),
        ("converged", "auto", "residual", args.maxiter),
    )
    for n in args.sizes:
        for label, params, stop, cap in settings:
            fields = []
            for solver, opts in ((thomas, {}), ("checkerboard", {"dop": 8, **CB_OPTIONS})):
                chosen = ("optimal" if solver == "checkerboard" else "cyclic") if params == "auto" else params
                res = run(backend, n, solver, chosen, stop, args.tol, cap, opts)
                fields.append(res["field"])
                table.append(row_of(label, res))
                r = table[-1]
                print(
                    f"{n:5d} {label:24s} {solver:12s} T_c {r['t_centre']:.10f} err {r['centre_error']:.2e} "
                    f"its {r['iterations']} ({r['inner_iterations']}) {r['seconds']:.2f} s",
                    flush=True,
                )
            table[-1]["max_difference_from_thomas"] = float(np.abs(fields[1] - fields[0]).max())
    study = []
    for dop in args.dops:
        for memory in ("shared", "global"):
            if memory == "shared" and dop > 32:
                continue
            res = run(
                backend,
                args.dop_n,
                "checkerboard",
                "optimal",
                "residual",
                args.tol,
                args.maxiter,
                {"dop": dop, "memory": memory, **CB_OPTIONS},
            )
            study.append(row_of(f"dop {dop} {memory}", res))
            print(
                f"dop {dop:3d} {memory:7s} its {res['iterations']} ({res['inner_iterations']}) "
                f"{res['seconds']:.2f} s err {res['centre_error']:.2e}",
                flush=True,
            )
    meta = dict(
        device=backend.describe(),
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        command="python " + " ".join(sys.argv),
        tol=args.tol,
        dop_n=args.dop_n,
    )
    lines = [
        f"# Steady heat conduction, ADI iteration ({meta['device']})",
        "",
        f"{meta['date']}; `{meta['command']}`. "
        "Grid n × n nodes; T_centre exact 25 (also for the discrete solution, so the error is the iteration's). "
        "its: ADI iterations (checkerboard iterations summed over the solves, largest line per solve). "
        "Paper (Table 1): 24.34, 24.64, 24.78, 24.80 for 128²–1024².",
        "",
        "| n² | setting | solver | parameters | T_centre | error | ADI its | checkerboard its | s "
        "| max \\|CB − Thomas\\| |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        cap = "" if r["converged"] else " (cap)"
        diff = r.get("max_difference_from_thomas")
        lines.append(
            f"| {r['n']} | {r['setting']} | {r['solver']} | {r['parameters']} | {r['t_centre']:.8f} "
            f"| {r['centre_error']:.2e} | {r['iterations']}{cap} | {r['inner_iterations'] or ''} "
            f"| {r['seconds']:.3g} | {'' if diff is None else format(diff, '.1e')} |"
        )
    lines += [
        "",
        f"dop study: checkerboard, optimal ρ, residual rule tol {args.tol:g}, {args.dop_n}² nodes",
        "",
        "| dop | memory | ADI its | checkerboard its | s | error |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in study:
        lines.append(
            f"| {r['options']['dop']} | {r['options']['memory']} | {r['iterations']} "
            f"| {r['inner_iterations']} | {r['seconds']:.3g} | {r['centre_error']:.2e} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = dict(meta=meta, table=table, dop_study=study)
    (out / f"heat_steady{args.tag}.json").write_text(json.dumps(result, indent=1))
    text = "\n".join(lines) + "\n"
    (out / f"heat_steady{args.tag}.md").write_text(text)
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/heat_steady_table.py"))
