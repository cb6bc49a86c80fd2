"""Validate the 2D lid-driven cavity (tridiag.cases.cavity2d) against Ghia et al. 1982 and its own grid convergence.

    python scripts/cavity2d_validation.py --re 100 400 1000 --n 64 128 256 --device gpu --tag h100

Runs ``python -m tridiag.cases.cavity2d`` for every Re and n, tabulates max |u - u_Ghia| on the
vertical and max |v - v_Ghia| on the horizontal centre line (our fields sampled bicubically at
Ghia's points), ψ_min and its centre, and, for each Re with grids n, 2n, 4n, the observed
order p = log2((ψ_n − ψ_2n) / (ψ_2n − ψ_4n)) of ψ_min and its Richardson extrapolation
ψ_4n + (ψ_4n − ψ_2n) / (2^p − 1), and the largest difference of the second-order Richardson
profile (from 2n, 4n) from Ghia's points (what is Ghia's own error, not ours). Writes
benchmarks/results/cavity2d_validation_<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys

from cli_case import run_case
from gpucfd.backend import DEVICES
from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import ensure_writable_dir
from script_options import check_each, check_tag
from tridiag.cases.cli import RE_RANGE
from tridiag.cases.line_solver import check_solver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = 0.01  # issue 8: max |Δu|, |Δv| <= 0.01 at 256^2


def validate_case(re, n, args, extra):
    out = os.path.join(args.runs, f"re{re:g}_n{n}")
    s, seconds = run_case(
        "tridiag.cases.cavity2d",
        [
            "--re",
            f"{re:g}",
            "--n",
            str(n),
            "--device",
            args.device,
            "--solver",
            args.solver,
            "--check-every",
            "500",
            *extra,
        ],
        out,
    )
    g = s["ghia"] or {}
    profile = os.path.join(out, "profiles.csv")
    ghia_points = [r for r in csv.DictReader(open(profile)) if r["point"] == "ghia"] if os.path.exists(profile) else []
    row = {
        "re": re,
        "n": n,
        "converged": s["converged"],
        "iterations": s["iterations"],
        "residual": s["residual"],
        "seconds": seconds,
        "seconds_per_iteration": s["seconds_per_iteration"],
        "device": s["device"],
        "solver": s["solver"],
        "dt": s["dt"],
        "psi_min": s["psi_min"],
        "max_abs_du": g.get("max_abs_du"),
        "at_y": g.get("at_y"),
        "max_abs_dv": g.get("max_abs_dv"),
        "at_x": g.get("at_x"),
        "max_abs_du_without_suspect": g.get("max_abs_du_without_suspect"),
        "max_abs_dv_without_suspect": g.get("max_abs_dv_without_suspect"),
        "ghia_psi_min": g.get("psi_min"),
        "at_ghia_points": [
            [p["profile"], float(p["x"]), float(p["y"]), float(p["value"]), float(p["ghia"])] for p in ghia_points
        ],
    }
    print(
        f"  {row['iterations']} iterations, {row['seconds']:.0f} s, max|du| {row['max_abs_du']}, "
        f"max|dv| {row['max_abs_dv']}, psi_min {s['psi_min']}",
        flush=True,
    )
    return row


def convergence(rows):
    """Observed order and Richardson value of ψ_min per Re from every triple n, 2n, 4n."""
    out = []
    for re in sorted({r["re"] for r in rows}):
        by_n = {r["n"]: r["psi_min"]["value"] for r in rows if r["re"] == re and r["psi_min"] and r["converged"]}
        for n in sorted(by_n):
            if 2 * n in by_n and 4 * n in by_n:
                p1, p2, p4 = by_n[n], by_n[2 * n], by_n[4 * n]
                ratio = (p1 - p2) / (p2 - p4) if p2 != p4 else math.nan
                order = math.log2(ratio) if ratio > 0 else math.nan
                extrap = p4 + (p4 - p2) / (2**order - 1) if math.isfinite(order) and order > 0 else math.nan
                fine = {r["n"]: r["at_ghia_points"] for r in rows if r["re"] == re and r["n"] in (2 * n, 4 * n)}
                profile = [p4[3] + (p4[3] - p2[3]) / 3 for p2, p4 in zip(fine[2 * n], fine[4 * n])]  # second order
                diff = [abs(v - p[4]) for v, p in zip(profile, fine[4 * n])]
                worst = fine[4 * n][diff.index(max(diff))] if diff else None
                out.append(
                    {
                        "re": re,
                        "n": [n, 2 * n, 4 * n],
                        "psi_min": [p1, p2, p4],
                        "order": order,
                        "richardson": extrap,
                        "profile_richardson_vs_ghia": max(diff) if diff else math.nan,
                        "profile_worst_point": worst[:3] if worst else None,
                    }
                )
    return out


def markdown(rows, orders, command):
    lines = [
        f"# 2D lid-driven cavity validation ({rows[0]['device']}, solver {rows[0]['solver']})",
        "",
        f"`{command}`",
        "",
        "Differences from Ghia, Ghia & Shin 1982 (Tables I–II, 129² grid), our fields sampled bicubically at "
        f"their 17 points per line; goal max |Δ| <= {GOAL}.",
        "",
        "Last column: the same without Ghia's Re 400 v at x = 0.9063 (−0.23827, at odds with its neighbours; "
        "see tridiag/cases/ghia1982.py SUSPECT).",
        "",
        "| Re | n (cells) | converged | iterations | s | max \\|Δu\\| (at y) | max \\|Δv\\| (at x) | ψ_min "
        "| centre (x, y) | Ghia ψ_min | max \\|Δu\\|, \\|Δv\\| without suspect |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pm = r["psi_min"] or {}

        def fmt(v, w):
            return f"{v:.4f} ({w:.4f})" if v is not None else "–"

        lines.append(
            f"| {r['re']:g} | {r['n']} | {r['converged']} | {r['iterations']} | {r['seconds']:.0f} | "
            f"{fmt(r['max_abs_du'], r['at_y'])} | {fmt(r['max_abs_dv'], r['at_x'])} | "
            f"{pm.get('value', math.nan):.6f} | ({pm.get('x', math.nan):.4f}, {pm.get('y', math.nan):.4f}) | "
            f"{r['ghia_psi_min'] if r['ghia_psi_min'] is not None else '–'} | "
            + (
                f"{r['max_abs_du_without_suspect']:.4f}, {r['max_abs_dv_without_suspect']:.4f} |"
                if r["max_abs_du_without_suspect"] is not None
                else "– |"
            )
        )
    if orders:
        lines += [
            "",
            "Grid convergence of ψ_min, and the grid-converged profiles (Richardson, second order, from 2n "
            "and 4n) against Ghia at their points:",
            "",
            "| Re | n | ψ_min | observed order | Richardson ψ_min | max \\|Richardson − Ghia\\| (where) |",
            "|---|---|---|---|---|---|",
        ]
        for o in orders:
            where = o["profile_worst_point"]
            at = f" ({where[0]} at x = {where[1]:.4f}, y = {where[2]:.4f})" if where else ""
            lines.append(
                f"| {o['re']:g} | {', '.join(map(str, o['n']))} | {', '.join(f'{v:.6f}' for v in o['psi_min'])} | "
                f"{o['order']:.2f} | {o['richardson']:.6f} | {o['profile_richardson_vs_ghia']:.4f}{at} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = ArgumentParser(prog="scripts/cavity2d_validation.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--re", type=float, nargs="+", default=[100.0, 400.0, 1000.0])
    ap.add_argument("--n", type=int, nargs="+", default=[256], help="cells per side; every Re runs every n")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--solver", default="auto")
    ap.add_argument("--runs", default="cavity2d-validation", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default=None, help="suffix of the result files (default: device)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="further tridiag.cases.cavity2d options after --")
    args = ap.parse_args(argv)
    check_each("--re", args.re, *RE_RANGE)
    check_each("--n", args.n, 4, integer=True)
    if args.device not in DEVICES:
        raise InputError(f"--device must be one of {', '.join(DEVICES)} (got {args.device!r})")
    check_solver(args.solver)
    check_tag(args.tag or "")
    ensure_writable_dir(args.runs, "--runs")
    ensure_writable_dir(args.results, "--results")
    extra = [a for a in args.extra if a != "--"]
    rows = [validate_case(re, n, args, extra) for re in args.re for n in args.n]
    orders = convergence(rows)
    command = " ".join(["python scripts/cavity2d_validation.py", *sys.argv[1:]])
    text = markdown(rows, orders, command)
    print(text)
    tag = args.tag or ("gpu" if "gpu" in rows[0]["device"] else "cpu")
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, f"cavity2d_validation_{tag}.json"), "w") as fh:
        json.dump(
            {"command": command, "goal_max_abs_diff": GOAL, "rows": rows, "psi_min_convergence": orders}, fh, indent=1
        )
    with open(os.path.join(args.results, f"cavity2d_validation_{tag}.md"), "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/cavity2d_validation.py"))
