"""Validation of python -m tridiag.cases.cylinder against Breuer et al. (2000): steady L_r/D and unsteady St.

Steady cases (default Re 10, 20, 30, 40) march in pseudo-time to a residual; each starts from the
previous one's fields. Unsteady cases (default Re 100, 75, 150, 200): the first (Re 100) starts
from rest with the start-up vortex blob and runs --t-first; the others start from its developed
wake and run --t-unsteady. St is measured on the second half of each run's probe signal
(tridiag.cases.wake.shedding). Results are rewritten after every case:

  benchmarks/results/cylinder_validation[_TAG].json, .md, cylinder_st[_TAG].csv, cylinder_validation[_TAG].png

Run from the repository root: python scripts/cylinder_validation.py --device gpu --tag h100
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from gpucfd.backend import get_backend
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir, write_csv, write_json

from script_options import check_tag
from tridiag.cases import breuer2000
from tridiag.cases.channel import FLUX, Channel, parse_grid
from tridiag.cases.cli import MAX_PSI_SWEEPS, RE_RANGE, check_tolerance
from tridiag.cases.cylinder import largest_grid, step_count
from tridiag.cases.cylinder_flow import ARRAYS, BODY, CFL, HOST_ARRAYS, CylinderFlow, default_dt
from tridiag.cases.cylinder_output import centre_line, validation_png
from tridiag.cases.line_solver import check_solver
from tridiag.cases.memory import check_fits
from tridiag.cases.vorticity import velocity
from tridiag.cases.wake import recirculation_length, shedding


def parse(argv):
    ap = ArgumentParser(prog="scripts/cylinder_validation.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default="160x800", help="ny x nx cells (default 160x800)")
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto)")
    ap.add_argument("--tag", default="", help="suffix of the result files, e.g. h100")
    ap.add_argument("--solver", default="auto", help="line solver (default auto)")
    ap.add_argument("--psi-sweeps", type=int, default=2, help="psi ADI sweeps per step (default 2)")
    ap.add_argument("--body", default="pressure", help="the cylinder's psi: pressure or fixed (default pressure)")
    ap.add_argument(
        "--steady-re", default="10,20,30,40", help="steady Reynolds numbers (default 10,20,30,40; '' for none)"
    )
    ap.add_argument(
        "--unsteady-re",
        default="100,75,150,200",
        help="unsteady Reynolds numbers, the first from rest (default 100,75,150,200; '' for none)",
    )
    ap.add_argument("--tol", type=float, default=1e-5, help="steady residual (default 1e-5)")
    ap.add_argument("--t-steady", type=float, default=300.0, help="pseudo-time cap of each steady case (default 300)")
    ap.add_argument("--t-first", type=float, default=150.0, help="time of the first unsteady case (default 150)")
    ap.add_argument("--t-unsteady", type=float, default=100.0, help="time of the later unsteady cases (default 100)")
    ap.add_argument("--out-dir", default="benchmarks/results", help="where the results go (default benchmarks/results)")
    return ap.parse_args(argv)


def _numbers(text: str, name: str) -> list:
    """The Reynolds numbers in ``text`` ("10,20"), each in RE_RANGE."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{name} must be comma-separated numbers (got {text!r})") from None
    return [check_range(name, v, *RE_RANGE) for v in values]


def steady_case(backend, channel, re, args, start) -> tuple:
    """(row, flow) of one steady case started from ``start`` (a CylinderFlow or None)."""
    flow = CylinderFlow(
        backend, channel, re, default_dt(channel, CFL["steady"], re), args.solver, args.psi_sweeps, body=args.body
    )
    if start is not None:
        flow.load(start)
    backend.synchronize()
    t0 = time.perf_counter()
    result = flow.run(round(args.t_steady / flow.dt), check_every=100, tol=args.tol)
    backend.synchronize()
    seconds = time.perf_counter() - t0
    u, _ = velocity(flow.psi, channel.grid, flow.boundary)
    lr = recirculation_length(*centre_line(channel, backend.to_numpy(u).astype(np.float64)), channel.faces[3])
    ref = breuer2000.recirculation_length(re)
    return {
        "re": re,
        "mode": "steady",
        "dt": flow.dt,
        "steps": flow.steps,
        "seconds": seconds,
        "converged": result["converged"],
        "residual": result["residual"],
        "lr": lr,
        "lr_breuer": ref,
        "lr_relative_difference": breuer2000.relative_difference(lr, ref),
        "pressure_mismatch": flow.pressure_loop(),
    }, flow


def unsteady_case(backend, channel, re, t_end, args, start) -> tuple:
    """(row, flow) of one unsteady case: from rest with the start-up blob, or from ``start``."""
    flow = CylinderFlow(
        backend, channel, re, default_dt(channel, CFL["unsteady"], re), args.solver, args.psi_sweeps, body=args.body
    )
    if start is None:
        flow.kick(0.5)
    else:
        flow.load(start)
    mismatch = []
    backend.synchronize()
    t0 = time.perf_counter()
    flow.run(
        round(t_end / flow.dt), check_every=100, progress=lambda f, res, stable: mismatch.append(f.pressure_loop())
    )
    backend.synchronize()
    seconds = time.perf_counter() - t0
    st = shedding(np.asarray(flow.times), np.asarray(flow.signal))
    ref = breuer2000.strouhal(re)
    late = np.abs(mismatch[len(mismatch) // 2 :])
    body = np.asarray(flow.body_psi[len(flow.body_psi) // 2 :])
    return {
        "re": re,
        "mode": "unsteady",
        "dt": flow.dt,
        "steps": flow.steps,
        "seconds": seconds,
        "from": "rest" if start is None else f"Re {start.core.re:g}",
        "t_end": flow.t,
        "st": st.frequency if st else None,
        "periods": st.periods if st else 0,
        "spread": st.spread if st else None,
        "amplitude": st.amplitude if st else None,
        "st_breuer": ref,
        "st_relative_difference": breuer2000.relative_difference(st.frequency if st else None, ref),
        "pressure_mismatch_max": float(late.max()) if late.size else None,
        "body_flux_amplitude": float(0.5 * (body.max() - body.min()) / FLUX) if body.size else None,
    }, flow


def write_results(args, summary: dict) -> None:
    """JSON, Markdown, St CSV and PNG of the cases so far."""
    tag = f"_{args.tag}" if args.tag else ""
    base = os.path.join(args.out_dir, f"cylinder_validation{tag}")
    write_json(base + ".json", summary)
    done = [r for r in summary["cases"] if "error" not in r]
    steady = [r for r in done if r["mode"] == "steady"]
    unsteady = sorted((r for r in done if r["mode"] == "unsteady"), key=lambda r: r["re"])
    write_csv(
        os.path.join(args.out_dir, f"cylinder_st{tag}.csv"),
        ["re", "st", "periods", "spread", "st_breuer", "grid"],
        [
            [
                r["re"],
                r["st"] if r["st"] is not None else "",
                r["periods"],
                r["spread"] if r["spread"] is not None else "",
                r["st_breuer"] if r["st_breuer"] is not None else "",
                summary["grid"],
            ]
            for r in unsteady
        ],
    )

    def fmt(v, f):
        return "–" if v is None else format(v, f)

    def pct(v):
        return "–" if v is None else f"{100 * v:+.2f} %"

    lines = [
        f"# Square cylinder in a channel: validation ({summary['grid']} cells, {summary['device']})",
        "",
        f"Solver {summary['solver']}, {summary['psi_sweeps']} ψ sweeps per step, cylinder ψ {summary['body']}; "
        f"reference: {breuer2000.CITATION}.",
        "",
        "## Steady: recirculation length behind the rear face",
        "",
        "| Re | L_r/D | Breuer fit | difference | residual | steps | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['re']:g} | {fmt(r['lr'], '.4f')} | {fmt(r['lr_breuer'], '.4f')} | "
        f"{pct(r['lr_relative_difference'])} | "
        f"{r['residual']:.1e} | {r['steps']} | {r['seconds']:.1f} |"
        for r in steady
    ]
    lines += [
        "",
        "## Unsteady: Strouhal number St = f D / U_max (cross-stream velocity 2D behind the cylinder)",
        "",
        "| Re | St | periods | period spread (%) | Breuer | difference | from | steps | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['re']:g} | {fmt(r['st'], '.4f')} | {r['periods']} | "
        f"{fmt(None if r['spread'] is None else 100 * r['spread'], '.2f')} | {fmt(r['st_breuer'], '.4f')} | "
        f"{pct(r['st_relative_difference'])} | "
        f"{r['from']} | {r['steps']} | {r['seconds']:.1f} |"
        for r in unsteady
    ]
    lines += [f"- {r['mode']} Re {r['re']:g}: {r['error']}" for r in summary["cases"] if "error" in r]
    lines += ["", f"Total {summary['seconds']:.1f} s.", ""]
    with open(base + ".md", "w") as fh:
        fh.write("\n".join(lines))
    validation_png(
        base + ".png",
        [(r["re"], r["lr"]) for r in steady],
        [(r["re"], r["st"]) for r in unsteady],
        breuer2000.recirculation_length,
        f"square cylinder, {summary['grid']} cells",
    )


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    ny, nx = parse_grid(args.grid)
    check_solver(args.solver)
    check_range("--psi-sweeps", args.psi_sweeps, 1, MAX_PSI_SWEEPS, integer=True)
    if args.body not in BODY:
        raise InputError(f"--body must be one of {', '.join(BODY)} (got {args.body!r})")
    check_tolerance("--tol", args.tol, float(np.finfo(np.float64).eps))
    for name in ("t_steady", "t_first", "t_unsteady"):
        check_range("--" + name.replace("_", "-"), getattr(args, name), 0, low_open=True)
    check_tag(args.tag)
    steady_re, unsteady_re = _numbers(args.steady_re, "--steady-re"), _numbers(args.unsteady_re, "--unsteady-re")
    backend = get_backend(args.device)
    check_fits(
        backend,
        (ny + 1) * (nx + 1),
        2 * ARRAYS,
        np.float64,
        HOST_ARRAYS,
        f"--grid {ny}x{nx}",  # two flows held
        largest_grid,
    )
    channel = Channel.create(ny, nx)
    for re in steady_re:
        step_count(args.t_steady, default_dt(channel, CFL["steady"], re), 1, "--t-steady")
    for re in unsteady_re:
        for option in ("--t-first", "--t-unsteady"):
            step_count(getattr(args, option[2:].replace("-", "_")), default_dt(channel, CFL["unsteady"], re), 1, option)
    ensure_writable_dir(args.out_dir, "--out-dir")
    summary = {
        "grid": args.grid,
        "device": backend.describe(),
        "solver": args.solver,
        "psi_sweeps": args.psi_sweeps,
        "body": args.body,
        "reference": breuer2000.CITATION,
        "cases": [],
        "seconds": 0.0,
        "command": " ".join(["python scripts/cylinder_validation.py", *(argv or sys.argv[1:])]),
    }
    t_start = time.perf_counter()
    start = None
    cases = [("steady", re, None) for re in steady_re]
    cases += [("unsteady", re, args.t_first if k == 0 else args.t_unsteady) for k, re in enumerate(unsteady_re)]
    first_unsteady = None
    for mode, re, t_end in cases:
        try:
            if mode == "steady":
                row, start = steady_case(backend, channel, re, args, start)
            else:
                row, flow = unsteady_case(backend, channel, re, t_end, args, first_unsteady)
                first_unsteady = first_unsteady or flow
        except ConvergenceError as exc:
            row = {"re": re, "mode": mode, "error": str(exc)}
        summary["cases"].append(row)
        summary["seconds"] = time.perf_counter() - t_start
        print(
            f"{mode} Re {re:g}: "
            + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in row.items()
                if k not in ("re", "mode")
            ),
            flush=True,
        )
        write_results(args, summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/cylinder_validation.py"))
