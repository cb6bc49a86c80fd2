"""Time to solution on the sample meshes of any shape: case files run as a user runs them.

    python scripts/bench_meshes.py --device cpu --refine 0 1 --tag cpu --cases meshes/dfg2d/dfg_2d_1_slab.toml \
        meshes/pipe/pipe.toml meshes/dfg3d/dfg_3d_1z.toml meshes/dfg3d/dfg_3d_1z_boundary_layer.toml
    python scripts/bench_meshes.py --device gpu --refine 0 1 2 --tag h100 --cases ...

Runs ``python -m fem3d.run CASE --refine K --device D`` for every case and K, each in its
own process (after one untimed run of the first case at refine 0 that compiles the kernels
and writes the Python bytecode, unless ``--no-warmup``), and tabulates per mesh and
refinement: elements, unknowns, the solver and what summary.json tells of its multigrid
(levels' elements, smoother, coarse solve; n/a where it tells nothing), nonlinear steps
(Newton among them), FGMRES iterations per nonlinear step, the process wall time, its peak
resident memory and CuPy's pool after the run (timed_runs.record_memory; none on a CPU),
and the case's quantities (c_D, c_L: the x and y force coefficients of a [report] forces
tag, prefixed "tag." when there are several; the named pressure differences) with their
relative errors against REFERENCES. A run that fails (an exit code other than 0 or 3, or
past ``--timeout``) is a row with its last error line. Saves
benchmarks/results/meshes_<tag>.{json,md} after every run, each row with its run's summary.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from fem3d.discretisation.refine import REFINE_MAX
from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import saved_record, write_record
from script_options import check_each, check_tag
from timed_runs import add_device_mib, child_environment, device_mib_environment, device_mib_note, record_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = ["--quiet", "--no-vtu", "--no-plots"]
DFG3D = {"c_D": 6.18533, "c_L": 0.009401, "delta_p": 0.17102}  # Braack & Richter 2006
REFERENCES = {  # by case file name: quantity -> reference value
    "dfg_3d_1z.toml": DFG3D,
    "dfg_3d_1z_boundary_layer.toml": DFG3D,
    "dfg_2d_1_slab.toml": {"c_D": 5.57953523384, "c_L": 0.010618948146, "delta_p": 0.11752016697},  # Nabh 1998
    "pipe.toml": {"delta_p": 0.8},  # Hagen-Poiseuille: 8 nu U L / R^2 (the case file's comment)
}


def quantities(q: dict) -> dict:
    """The named scalars of a summary's ``quantities``: force coefficients and pressure differences."""
    out = {}
    for tag, f in q["forces"].items():
        prefix = f"{tag}." if len(q["forces"]) > 1 else ""
        if "coefficients" in f:
            out[prefix + "c_D"], out[prefix + "c_L"] = f["coefficients"][:2]
    out.update(q["differences"])
    return out


def row_of(case: str, refine: int, command: str, wall: float, memory: dict, s: dict) -> dict:
    """What a run measured, from its summary.json ``s`` and memory.json ``memory``."""
    steps = [st for stage in s["continuation"] for st in stage["steps"]]
    mg = s["per_rank"][0].get("multigrid") or {}
    values = quantities(s["quantities"])
    refs = REFERENCES.get(os.path.basename(case), {})
    return {
        "case": case,
        "refine": refine,
        "command": command,
        "device": s["device"],
        "converged": s["converged"],
        "elements": s["mesh"]["elements"],
        "unknowns": s["dofs"],
        "solver": s["options"]["linear"]["solver"],
        "levels": [lv["elements"] for lv in mg.get("levels", [])],
        "smoother": " / ".join(dict.fromkeys(lv["smoother"] for lv in mg["levels"][:-1])) if mg.get("levels") else None,
        "coarse_solve": f"{mg['coarse_solve']['method']} ({mg['coarse_solve']['unknowns']:,})" if mg else None,
        "steps": len(steps),
        "newton_steps": sum(st["kind"] == "newton" for st in steps),
        "linear_iterations": s["linear_iterations"],
        "iterations_per_step": s["linear_iterations"] / max(1, len(steps)),
        "wall_s": wall,
        "run_s": s["t_run_s"],
        "max_rss_bytes": memory["max_rss_bytes"],
        "device_pool_bytes": memory["device_pool_bytes"],
        "quantities": values,
        "references": {k: v for k, v in refs.items() if k in values},
        "relative_errors": {k: (values[k] - v) / abs(v) for k, v in refs.items() if k in values},
        "summary": s,
    }


def run(args, case: str, refine: int, out: str) -> dict:
    """One timed run of ``case`` at ``refine`` with its outputs in ``out`` (seeing the GPU's
    memory as --device-mib says); its row."""
    budget = [] if args.max_steps is None else ["--max-steps", str(args.max_steps)]
    argv = [case, "--refine", str(refine), "--device", args.device, *budget, *OUTPUTS, "--out", out]
    command = "python -m fem3d.run " + " ".join(argv)
    print(command, flush=True)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", *argv],
            capture_output=True,
            text=True,
            timeout=args.timeout,
            env=child_environment(device_mib_environment(args.device_mib)),
        )
    except subprocess.TimeoutExpired:
        return {
            "case": case,
            "refine": refine,
            "command": command,
            "error": f"stopped after {args.timeout:g} s (--timeout)",
        }
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 3):
        lines = proc.stderr.strip().splitlines() or ["no error output"]
        return {"case": case, "refine": refine, "command": command, "error": f"exit {proc.returncode}: {lines[-1]}"}
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    with open(os.path.join(out, "memory.json")) as fh:
        memory = json.load(fh)
    row = row_of(case, refine, command, wall, memory, summary)
    row["device_mib"] = args.device_mib
    return row


def _na(value, fmt: str = "{}") -> str:
    """``value`` formatted, or n/a when summary.json did not report it."""
    return "n/a" if value is None else fmt.format(value)


def table(rows: list) -> str:
    lines = [
        "| case | refine | elements | unknowns | solver | multigrid levels (elements) | smoother | coarse solve "
        "| steps (Newton) | FGMRES its/step | wall s | peak RSS GB | device pool GB | quantities (error) | converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = os.path.basename(r["case"])
        if "error" in r:
            lines.append(f"| {name} | {r['refine']} | failed: {r['error']} |" + " |" * 12)
            continue
        found = ", ".join(
            f"{k} {v:.6g}" + (f" ({100 * r['relative_errors'][k]:+.2f} %)" if k in r["relative_errors"] else "")
            for k, v in r["quantities"].items()
        )
        pool = None if r["device_pool_bytes"] is None else r["device_pool_bytes"] / 1e9
        lines.append(
            f"| {name} | {r['refine']} | {r['elements']:,} | {r['unknowns']:,} | {r['solver']} "
            f"| {' / '.join(map(str, r['levels'])) or 'n/a'} | {_na(r['smoother'])} | {_na(r['coarse_solve'])} "
            f"| {r['steps']} ({r['newton_steps']}) | {r['iterations_per_step']:.1f} | {r['wall_s']:.1f} "
            f"| {r['max_rss_bytes'] / 1e9:.2f} | {_na(pool, '{:.2f}')} | {found} "
            f"| {'yes' if r['converged'] else 'no'} |"
        )
    return "\n".join(lines)


def save(base: str, rows: list, commands: list, warmup: str | None) -> None:
    """Write ``rows`` (by case, then refinement) as base.json and base.md, each atomically."""
    cases = list(dict.fromkeys(os.path.basename(r["case"]) for r in rows))
    rows = sorted(rows, key=lambda r: (cases.index(os.path.basename(r["case"])), r["refine"]))
    device = next((r["device"] for r in rows if "device" in r), "n/a")
    write_record(
        base,
        {"commands": commands, "warmup": warmup, "rows": rows},
        f"# Time to solution on the sample meshes ({device})\n\n"
        + "".join(f"`{c}`\n\n" for c in commands)
        + (f"Each command after {warmup}; " if warmup else "No warm-up run; ")
        + device_mib_note(rows)
        + "wall s: the process's, as a user runs it; peak RSS: its largest resident size; device pool: CuPy's "
        "pool after the run; quantities: c_D, c_L (force coefficients in x and y) and pressure differences, "
        "with their relative errors against the references of scripts/bench_meshes.py.\n\n" + table(rows) + "\n",
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        from fem3d import run as fem3d_run

        return record_memory(fem3d_run.main, argv[1:])
    ap = ArgumentParser(prog="scripts/bench_meshes.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", required=True, help="case files (TOML; fem3d.problems.case)")
    ap.add_argument(
        "--refine", type=int, nargs="+", default=[0], help="refinement counts of each case's mesh (default 0)"
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument(
        "--max-steps", type=int, default=None, help="nonlinear steps of each run (default: the case file's)"
    )
    ap.add_argument(
        "--timeout", type=float, default=None, help="seconds a run may take before it is stopped and recorded as failed"
    )
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first run")
    ap.add_argument("--runs", default="bench-meshes", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", required=True, help="suffix of the result files, e.g. cpu or h100")
    ap.add_argument("--add", action="store_true", help="add the rows to the tag's saved record")
    add_device_mib(ap)
    args = ap.parse_args(argv)
    device_mib_environment(args.device_mib)
    check_each("--refine", args.refine, 0, REFINE_MAX, integer=True)
    if args.max_steps is not None:
        check_each("--max-steps", [args.max_steps], 1, 10000, integer=True)
    if args.timeout is not None:
        check_each("--timeout", [args.timeout], 0, None, low_open=True)
    missing = [c for c in args.cases if not os.path.isfile(c)]
    if missing:
        raise InputError(f"--cases: no case file {missing[0]}")
    base = os.path.join(args.results, f"meshes_{check_tag(args.tag)}")
    if args.add and not os.path.exists(base + ".json"):
        raise InputError(f"--add: no saved record {base}.json to add to")
    saved, commands = saved_record(base) if args.add else ([], [])
    done = {(os.path.basename(c), r) for c in args.cases for r in args.refine}
    saved = [r for r in saved if (os.path.basename(r["case"]), r["refine"]) not in done]  # a rerun replaces its row
    commands.append("python scripts/bench_meshes.py " + " ".join(argv))
    warmup = None
    if not args.no_warmup:
        warmup = f"one untimed run of {os.path.basename(args.cases[0])} at refine 0"
        run(args, args.cases[0], 0, os.path.join(args.runs, "warmup"))
    rows = []
    for case in args.cases:  # the record is saved after every run: a sweep cut short keeps what it measured
        for refine in args.refine:
            stem = os.path.splitext(os.path.basename(case))[0]
            rows.append(run(args, case, refine, os.path.join(args.runs, f"{stem}_r{refine}")))
            print(
                "  "
                + (
                    rows[-1].get("error")
                    or f"{rows[-1]['wall_s']:.1f} s, {rows[-1]['steps']} steps, "
                    f"{rows[-1]['iterations_per_step']:.1f} its/step"
                ),
                flush=True,
            )
            save(base, saved + rows, commands, warmup)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_meshes.py"))
