"""Paper solver against the multigrid solver on the lid-driven cube: time to the same answer.

    python scripts/bench_solvers.py --device gpu --n 20 30 40 --re 100 400 1000
    python scripts/bench_solvers.py --device cpu --n 8 12 --re 400

Runs ``python -m fem3d.cavity --n N --grading 1 --re RE --solver S`` (each in its own
process, after one untimed 4^3 run per solver that compiles the kernels) for every N, Re
and solver, and reports nonlinear steps (Newton among them),
Krylov iterations in all and per step, seconds of each phase and in all, the device
memory the run held at its peak (CuPy's pool; the element matrices' own for scale) and
the largest deviation of the centre-line profiles from the published data. Saves
benchmarks/results/bench_solvers_<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gpucfd.errors import ArgumentParser, run_cli
from script_options import check_each, check_names, check_tag
from timed_runs import record_memory, timed_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLVERS = ("paper", "mg")
WARMUP_N = 8  # box of the untimed run per solver that comes first: the smallest with two multigrid levels (8^3 over
# 4^3); a 4^3 box is solved directly and left the transfer and smoother kernels to the first timed run (H100: 32^3 took
# 12.8 s after a 4^3 warm-up, 7.0 s after an 8^3 run)
WARMUP_ENV = {"PYTHONDONTWRITEBYTECODE": None}  # the warm-up writes the bytecode of what it imports, as an installation
# does: where the machine sets PYTHONDONTWRITEBYTECODE (the lent GPU machines) every run compiled ~220 modules, 0.5 s


def run_folder(runs: str, solver: str, n: int, re: float, name: str = "") -> str:
    """The --out folder of a run of :func:`run`."""
    return os.path.join(runs, f"{solver}_n{n}_re{re:g}{name}")


def run(
    n: int,
    re: float,
    solver: str,
    device: str,
    runs: str,
    extra: list,
    grading: float = 1.0,
    env: dict | None = None,
    name: str = "",
) -> dict:
    """One timed ``python -m fem3d.cavity`` run (``solver`` auto, mg or paper; ``env`` added to
    its environment; its outputs in runs/<solver>_n<n>_re<re><name>) and what it measured."""
    out = run_folder(runs, solver, n, re, name)
    args = [
        "--re",
        f"{re:g}",
        "--n",
        str(n),
        "--grading",
        f"{grading:g}",
        "--device",
        device,
        "--solver",
        solver,
        "--quiet",
        "--no-vtu",
        "--no-plots",
        "--out",
        out,
        *extra,
    ]
    print(f"python -m fem3d.cavity {' '.join(args)}", flush=True)
    wall, s, memory = timed_child(__file__, args, out, env)
    pool = memory["device_pool_bytes"]
    steps = [st for stage in s["continuation"] for st in stage["steps"]]
    final = [st for st in s["continuation"][-1]["steps"]]
    elements = n**3
    return {
        "n": n,
        "re": re,
        "solver": s["options"]["linear"]["solver"],
        "device": s["device"],
        "converged": s["converged"],
        "unknowns": s["dofs"],
        "steps": len(steps),
        "newton_steps": sum(st["kind"] == "newton" for st in steps),
        "setups": sum(st["rebuilt"] for st in steps),
        "linear_iterations": s["linear_iterations"],
        "iterations_per_step": s["linear_iterations"] / max(1, len(steps)),
        "final_stage_iterations_per_step": sum(st["linear_iterations"] for st in final) / max(1, len(final)),
        "times_s": s["times_s"],
        "run_s": s["t_run_s"],
        "wall_s": wall,
        "device_pool_bytes": pool,
        "element_matrix_bytes": elements * 89 * 89 * 8,
        "largest_deviation": s["accuracy"]["largest_deviation"]["max_abs_diff"]
        if s["accuracy"]["largest_deviation"]
        else None,
        "residual": s["residual"],
        "sequence": [
            {
                "elements": q["elements"],
                "steps": sum(len(st["steps"]) for st in q["stages"]),
                "linear_iterations": sum(x["linear_iterations"] for st in q["stages"] for x in st["steps"]),
            }
            for q in s.get("sequence", [])
        ],
    }


def table(rows: list) -> str:
    lines = [
        "| N | Re | solver | steps (Newton) | set-ups | Krylov its | its/step (final Re) | element matrices s "
        "| linear set-up s | solve s | run s | speed-up | device memory GB (matrices) | max profile diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    paper = {(r["n"], r["re"]): r["run_s"] for r in rows if r["solver"] == "paper"}
    for r in rows:
        t = r["times_s"]
        ref = paper.get((r["n"], r["re"]))
        speed = f"{ref / r['run_s']:.1f}x" if ref and r["solver"] != "paper" else ""
        mem = (
            ""
            if r["device_pool_bytes"] is None
            else f"{r['device_pool_bytes'] / 1e9:.1f} ({r['element_matrix_bytes'] / 1e9:.1f})"
        )
        dev = "" if r["largest_deviation"] is None else f"{r['largest_deviation']:.4f}"
        lines.append(
            f"| {r['n']} | {r['re']:g} | {r['solver']} | {r['steps']} ({r['newton_steps']}) | {r['setups']} | "
            f"{r['linear_iterations']} | "
            f"{r['iterations_per_step']:.1f} ({r['final_stage_iterations_per_step']:.1f}) | "
            f"{t.get('element_matrices', 0):.2f} | "
            f"{t.get('linear_setup', 0):.2f} | {t.get('solve', 0):.2f} | {r['run_s']:.2f} | {speed} | {mem} | {dev} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        from fem3d import cavity

        return record_memory(cavity.main, argv[1:])
    ap = ArgumentParser(prog="scripts/bench_solvers.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[20, 30, 40])
    ap.add_argument("--re", type=float, nargs="+", default=[100.0, 400.0, 1000.0])
    ap.add_argument("--solvers", nargs="+", default=list(SOLVERS))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--runs", default="bench-solvers", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default=None, help="suffix of the result files (default: device and sizes)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="further fem3d.cavity options after --")
    args = ap.parse_args(argv)
    check_each("--n", args.n, 2, 200, integer=True)
    check_each("--re", args.re, 0, 1e5, low_open=True)
    check_names("--solvers", args.solvers, SOLVERS)
    tag = check_tag(args.tag) if args.tag else None
    extra = [a for a in args.extra if a != "--"]
    for (
        solver
    ) in args.solvers:  # untimed: compiles and caches the kernels, as any earlier run on the machine would have
        run(WARMUP_N, args.re[0], solver, args.device, os.path.join(args.runs, "warmup"), extra, env=WARMUP_ENV)
    rows = [
        run(n, re, solver, args.device, args.runs, extra) for n in args.n for re in args.re for solver in args.solvers
    ]
    text = table(rows)
    print(text)
    tag = tag or f"{'gpu' if 'gpu' in rows[0]['device'] else 'cpu'}_n{'-'.join(map(str, args.n))}"
    os.makedirs(args.results, exist_ok=True)
    command = "python scripts/bench_solvers.py " + " ".join(argv)
    with open(os.path.join(args.results, f"bench_solvers_{tag}.json"), "w") as fh:
        json.dump(
            {"command": command, "warmup": f"one untimed {WARMUP_N}^3 run per solver first", "rows": rows}, fh, indent=1
        )
    with open(os.path.join(args.results, f"bench_solvers_{tag}.md"), "w") as fh:
        fh.write(
            f"# Solvers on the lid-driven cube ({rows[0]['device']})\n\n`{command}`\n\n"
            f"After one untimed {WARMUP_N}^3 run per solver (kernels compiled and cached, Python bytecode written)."
            f"\n\n{text}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_solvers.py"))
