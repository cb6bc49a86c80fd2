"""Validate the 3D lid-driven cavity against published centre-line profiles.

    python scripts/cavity_validation.py --re 100 400 1000 --n 24 24 40 --grading 1 --device gpu

Runs ``python -m fem3d.cavity`` for each Reynolds number (with its own N when one is
given per Re), then prints and saves a table of max |u - u_ref| on the vertical and
max |v - v_ref| on the horizontal centre line against every reference set in
fem3d/reference_data/ for that Re, to benchmarks/results/cavity_validation_<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cli_case import run_case
from gpucfd.errors import ArgumentParser, check_range, run_cli
from script_options import check_each

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = ArgumentParser(prog="scripts/cavity_validation.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--re", type=float, nargs="+", default=[100.0, 400.0, 1000.0])
    ap.add_argument("--n", type=int, nargs="+", default=[24], help="one N for all, or one per Re")
    ap.add_argument("--grading", type=float, default=0.0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--runs", default="cavity-validation", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default=None, help="suffix of the result files (default: device and sizes)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="further fem3d.cavity options after --")
    args = ap.parse_args(argv)
    if len(args.n) not in (1, len(args.re)):
        ap.error("--n takes one value or one per --re")
    check_each("--re", args.re, 0, low_open=True)
    check_each("--n", args.n, 1, integer=True)
    check_range("--grading", args.grading, 0)
    sizes = args.n * len(args.re) if len(args.n) == 1 else args.n
    extra = [a for a in args.extra if a != "--"]
    rows = []
    for re, n in zip(args.re, sizes):
        out = os.path.join(args.runs, f"re{re:g}_n{n}")
        summary, seconds = run_case(
            "fem3d.cavity",
            [
                "--re",
                f"{re:g}",
                "--n",
                str(n),
                "--grading",
                f"{args.grading:g}",
                "--device",
                args.device,
                "--quiet",
                *extra,
            ],
            out,
        )
        rows.append(
            {
                "re": re,
                "n": n,
                "grading": args.grading,
                "converged": summary["converged"],
                "reason": summary["reason"],
                "nonlinear_steps": summary["nonlinear_steps"],
                "linear_iterations": summary["linear_iterations"],
                "seconds": seconds,
                "t_unit_us": summary["t_unit_us"],
                "device": summary["device"],
                "validation": summary["validation"],
            }
        )
    lines = [
        "| Re | N | reference | profile | max abs diff | at | converged | steps | linear its | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for v in r["validation"] or [
            {"reference": "(none for this Re)", "profile": "", "max_abs_diff": float("nan"), "at": float("nan")}
        ]:
            lines.append(
                f"| {r['re']:g} | {r['n']} | {v['reference']} | {v['profile']} | {v['max_abs_diff']:.4f} | "
                f"{v['at']:.4f} | "
                f"{r['converged']} | {r['nonlinear_steps']} | {r['linear_iterations']} | {r['seconds']:.0f} |"
            )
    table = "\n".join(lines)
    print(table)
    tag = args.tag or f"{'gpu' if 'gpu' in rows[0]['device'] else 'cpu'}_n{'-'.join(map(str, sizes))}_g{args.grading:g}"
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, f"cavity_validation_{tag}.json"), "w") as fh:
        json.dump({"command": " ".join(sys.argv), "rows": rows}, fh, indent=1)
    with open(os.path.join(args.results, f"cavity_validation_{tag}.md"), "w") as fh:
        fh.write(f"# Cavity validation ({rows[0]['device']})\n\n`{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/cavity_validation.py"))
