"""Time to solution against the mesh size: the lid-driven cube as a user runs it, every N.

    python scripts/bench_sizes.py --device cpu --re 400 --n 8 9 10 11 12 13 14 15 16 17 18 19 20 --grading 0 --tag cpu
    python scripts/bench_sizes.py --device gpu --re 1000 --tag h100 \\
        --n 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48
    python scripts/bench_sizes.py --device gpu --re 1000 --tag h100 --add \\
        --n 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64

Runs ``python -m fem3d.cavity --re RE --n N --grading G --device D`` with the default
``--solver auto`` (each in its own process, after two untimed 8^3 runs, with stored element matrices and
with partial assembly, that compile the kernels of both and write the Python bytecode; scripts/bench_solvers.py's
runs) for every N, and tabulates the solver ``auto``
took, the coarser meshes solved first (mesh sequencing, fem3d.cavity --sequence) with their
nonlinear steps, the finest mesh's Newton steps and Krylov iterations per step, the multigrid set-up's share of the run,
the process wall time, seconds per million unknowns and per element against the median
over the sizes, the device memory at the peak and the largest deviation of the centre-line
profiles from the published data. Saves benchmarks/results/bench_sizes_<tag>.{json,md,png}
(the png: seconds per million unknowns against N), after every run, each row with its run's
summary.json. With ``--add`` the rows join those of the tag's saved
record (a row of the same N replaced; ratios over all rows): a sweep longer than one sitting
of a lent machine, recorded in the same session. With ``--cold`` each N is first run with an
empty kernel cache (CUPY_CACHE_DIR a new folder: every kernel compiled, as on a fresh machine),
its wall time and summary recorded beside the warm run's.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

from gpucfd.errors import ArgumentParser, InputError, run_cli
from bench_solvers import WARMUP_ENV, WARMUP_N, run, run_folder
from gpucfd.output import atomic_path, saved_record, write_record
from script_options import check_each, check_tag
from timed_runs import add_device_mib, device_mib_environment, device_mib_note, record_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = f"two untimed {WARMUP_N}^3 runs, with stored element matrices and with partial assembly"


def rows_with_ratios(rows: list) -> list:
    """The rows with seconds per million unknowns, the set-up share and seconds per
    element over the median of all rows."""
    for r in rows:
        r["s_per_m_unknowns"] = r["wall_s"] / (r["unknowns"] / 1e6)
        r["kb_per_element"] = None if r["device_pool_bytes"] is None else r["device_pool_bytes"] / r["n"] ** 3 / 1e3
        r["setup_share"] = r["times_s"].get("linear_setup", 0.0) / r["run_s"]
    median = statistics.median(r["wall_s"] / r["n"] ** 3 for r in rows)
    for r in rows:
        r["per_element_vs_median"] = r["wall_s"] / r["n"] ** 3 / median
    return rows


def table(rows: list) -> str:
    lines = [
        "| N | unknowns | solver | coarser meshes first: N (steps) | Newton steps | Krylov its/step | set-up share "
        "| wall s | cold-cache wall s | s per M unknowns | s per element / median | device memory GB | kB per element "
        "| max profile diff | converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mem = "" if r["device_pool_bytes"] is None else f"{r['device_pool_bytes'] / 1e9:.1f}"
        per = "" if r["kb_per_element"] is None else f"{r['kb_per_element']:.0f}"
        cold = "" if r.get("cold_wall_s") is None else f"{r['cold_wall_s']:.1f}"
        dev = "" if r["largest_deviation"] is None else f"{r['largest_deviation']:.4f}"
        coarser = ", ".join(f"{round(q['elements'] ** (1 / 3))} ({q['steps']})" for q in r.get("sequence", []))
        lines.append(
            f"| {r['n']} | {r['unknowns']:,} | {r['solver']} | {coarser} | {r['newton_steps']} "
            f"| {r['iterations_per_step']:.1f} "
            f"| {100 * r['setup_share']:.0f} % | {r['wall_s']:.1f} | {cold} | {r['s_per_m_unknowns']:.1f} "
            f"| {r['per_element_vs_median']:.2f} | {mem} | {per} | {dev} | {'yes' if r['converged'] else 'no'} |"
        )
    return "\n".join(lines)


def plot(rows: list, path: str, title: str) -> None:
    """Seconds per million unknowns against N, one marker per solver."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for solver in sorted({r["solver"] for r in rows}):
        mine = [r for r in rows if r["solver"] == solver]
        ax.plot([r["n"] for r in mine], [r["s_per_m_unknowns"] for r in mine], "o", label=solver)
    ax.set_xlabel("N (N^3 elements)")
    ax.set_ylabel("process wall s per million unknowns")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def save(base: str, rows: list, commands: list, re: float, grading: float) -> None:
    """Write ``rows`` (ratios added) as base.json, base.md and base.png, each atomically."""
    rows = rows_with_ratios(sorted(rows, key=lambda r: r["n"]))
    text = table(rows)
    device = rows[0]["device"]
    write_record(
        base,
        {"commands": commands, "warmup": WARMUP, "rows": rows},
        f"# Time to solution against N, lid-driven cube at Re {re:g} ({device})\n\n"
        + "".join(f"`{c}`\n\n" for c in commands)
        + f"`--solver auto`, grading {grading:g}; after {WARMUP} (kernels compiled and cached, "
        "Python bytecode written); "
        + device_mib_note(rows)
        + "wall s: the process's, as a user runs it; cold-cache wall s: the same run with an empty kernel cache "
        "(`--cold`: every kernel compiled first, as on a fresh machine); kB per element: the device memory "
        "over the elements.\n\n" + text + "\n",
    )
    with atomic_path(base + ".png") as tmp:
        plot(rows, tmp, f"lid-driven cube, Re {re:g}: {device}")


def summary_of(out: str) -> dict:
    """The summary.json of the run in ``out``."""
    with open(os.path.join(out, "summary.json")) as fh:
        return json.load(fh)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:
        from fem3d import cavity

        return record_memory(cavity.main, argv[1:])
    ap = ArgumentParser(prog="scripts/bench_sizes.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", required=True, help="box sizes N (N^3 elements)")
    ap.add_argument("--re", type=float, default=400.0, help="Reynolds number (default 400)")
    ap.add_argument("--grading", type=float, default=1.0, help="wall clustering of the box (default 1)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--runs", default="bench-sizes", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", required=True, help="suffix of the result files, e.g. cpu or h100")
    ap.add_argument("--add", action="store_true", help="add the rows to the tag's saved record")
    ap.add_argument("--cold", action="store_true", help="run each N with an empty kernel cache first")
    add_device_mib(ap)
    args = ap.parse_args(argv)
    check_each("--n", args.n, 2, 200, integer=True)
    check_each("--re", [args.re], 0, 1e5, low_open=True)
    env = device_mib_environment(args.device_mib)
    tag = check_tag(args.tag)
    base = os.path.join(args.results, f"bench_sizes_{tag}")
    if args.add and not os.path.exists(base + ".json"):
        raise InputError(f"--add: no saved record {base}.json to add to")
    saved, commands = saved_record(base) if args.add else ([], [])
    saved = [r for r in saved if r["n"] not in args.n]  # a saved row of the same N is replaced
    commands.append("python scripts/bench_sizes.py " + " ".join(argv))
    os.makedirs(args.results, exist_ok=True)
    for assembly in ("element", "partial"):  # untimed: compiles the kernels of both, which the sizes take
        folder = os.path.join(args.runs, "warmup" if assembly == "element" else "warmup_partial")
        run(WARMUP_N, args.re, "auto", args.device, folder, ["--assembly", assembly], args.grading, WARMUP_ENV)
    rows = []
    for n in args.n:  # the record is saved after every run: a sweep cut short keeps what it measured
        cold = None
        if args.cold:
            with tempfile.TemporaryDirectory(prefix="kernel-cache-") as cache:
                cold = run(
                    n,
                    args.re,
                    "auto",
                    args.device,
                    args.runs,
                    [],
                    args.grading,
                    {"CUPY_CACHE_DIR": cache, **(env or {})},
                    "_cold",
                )
        rows.append(run(n, args.re, "auto", args.device, args.runs, [], args.grading, env))
        rows[-1]["device_mib"] = args.device_mib
        rows[-1]["summary"] = summary_of(run_folder(args.runs, "auto", n, args.re))
        rows[-1]["cold_wall_s"] = None if cold is None else cold["wall_s"]
        rows[-1]["cold_summary"] = (
            None if cold is None else summary_of(run_folder(args.runs, "auto", n, args.re, "_cold"))
        )
        save(base, saved + rows, commands, args.re, args.grading)
    print(table(rows_with_ratios(sorted(saved + rows, key=lambda r: r["n"]))))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_sizes.py"))
