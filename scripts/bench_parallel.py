"""Time to solution on 1, 2, 4 ... ranks (one GPU each): the commands users type under an MPI launcher.

    python scripts/bench_parallel.py --ranks 1 2 4 --strong 64 112 --weak 40 --dfg 3 --device gpu \\
        --launcher mpirun --tag h200x4

Studies, each run a new ``LAUNCHER -n P`` process group after untimed 8^3 runs on P
ranks, on a GPU with stored and with sum-factorised element matrices (kernels compiled,
bytecode written):

- strong: ``python -m fem3d.cavity --re RE --n N --grading G`` (the lid-driven cube,
  default solver) for each N of --strong on every P; speed-up t_1 / t_P, efficiency
  speed-up / P;
- weak: the cavity cube of side round(N P^(1/3)) on P ranks (about N^3 elements per
  rank, the same flow refined); efficiency t_1 / t_P times the elements per rank of
  the P-rank run over the one-rank run's;
- dfg: ``python -m fem3d.run meshes/dfg3d/dfg_3d_1z.toml --refine R`` on every P;
  speed-up t_1 / t_P.

Each row holds the process wall time of the launcher (what a user waits for, one rank
included: ``-n 1`` also goes through the launcher), the Newton steps and Krylov
iterations, rank 0's seconds per phase (fem3d.cavity's summary.json), each rank's seconds
communicating, its traffic (fem3d.parallel.comm) and the partition, with the run's
summary.json. Saves benchmarks/results/parallel_<tag>.{json,md} after every run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

from bench_solvers import WARMUP_ENV, WARMUP_N
from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import write_record
from script_options import check_each, check_tag
from timed_runs import child_environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DFG_CASE = os.path.join(ROOT, "meshes", "dfg3d", "dfg_3d_1z.toml")
OUTPUTS = ["--quiet", "--no-vtu", "--no-plots"]
PHASES = ("data_preparation", "element_matrices", "linear_setup", "solve")
ASSEMBLIES = ("element", "partial")  # the untimed runs on a GPU compile both: a mesh too large for stored element
# matrices on fewer ranks takes the sum-factorised kernels (112^3 on one H200: 4.2 s of compilation in a run after an
# 8^3 warm-up)


def cavity_args(args, grid) -> list:
    nx, ny, nz = grid
    return [
        "-m",
        "fem3d.cavity",
        "--re",
        f"{args.re:g}",
        "--nx",
        str(nx),
        "--ny",
        str(ny),
        "--nz",
        str(nz),
        "--grading",
        f"{args.grading:g}",
        "--device",
        args.device,
    ]


def dfg_args(args, refine: int) -> list:
    return ["-m", "fem3d.run", DFG_CASE, "--refine", str(refine), "--device", args.device]


def launch(args, ranks: int, command: list, out: str, env: dict | None = None) -> tuple[float, int, str]:
    """Run ``LAUNCHER -n ranks python command --out out``; (wall seconds, exit code, stderr)."""
    cmd = shlex.split(args.launcher) + ["-n", str(ranks), sys.executable, *command, *OUTPUTS, "--out", out]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_environment(env))
    return time.perf_counter() - t0, proc.returncode, proc.stderr


def row_of(study: str, case: str, ranks: int, command: list, wall: float, s: dict) -> dict:
    """What a run measured, from its summary.json ``s``."""
    per_rank = s["per_rank"]
    steps = [st for stage in s["continuation"] for st in stage["steps"]]
    comm = [r["communication_s"] for r in per_rank]
    return {
        "study": study,
        "case": case,
        "ranks": ranks,
        "command": "python " + " ".join(os.path.relpath(a, ROOT) if a == DFG_CASE else a for a in command),
        "device": s["device"],
        "communicator": s["communicator"],
        "converged": s["converged"],
        "elements": s["mesh"]["elements"],
        "unknowns": s["dofs"],
        "wall_s": wall,
        "run_s": s["t_run_s"],
        "newton_steps": s["nonlinear_steps"],
        "linear_iterations": s["linear_iterations"],
        "iterations_per_step": s["linear_iterations"] / max(1, len(steps)),
        "times_s": s["times_s"],
        "communication_s": comm,
        "communication_share": max(comm) / s["t_run_s"],
        "traffic": [r.get("traffic") for r in per_rank],
        "partition": s.get("partition"),
        "sequence": [q["elements"] for q in s.get("sequence", [])],
        "summary": s,
    }


def one(args, study: str, case: str, ranks: int, command: list, runs: str, rows: list, save) -> None:
    out = os.path.join(runs, f"{study}_{case}_p{ranks}")
    print(f"{study} {case} on {ranks}: {args.launcher} -n {ranks} python {' '.join(command)}", flush=True)
    wall, code, err = launch(args, ranks, command, out)
    path = os.path.join(out, "summary.json")
    if code not in (0, 3) or not os.path.exists(path):
        sys.stderr.write(err[-3000:])
        rows.append({"study": study, "case": case, "ranks": ranks, "error": f"exit {code}: {err.strip()[-300:]}"})
    else:
        with open(path) as fh:
            rows.append(row_of(study, case, ranks, command, wall, json.load(fh)))
        r = rows[-1]
        print(
            f"  {wall:.1f} s, {r['newton_steps']} steps, {r['iterations_per_step']:.1f} its/step, "
            f"communication {100 * r['communication_share']:.0f} %",
            flush=True,
        )
    save(rows)


def ratios(rows: list) -> list:
    """Speed-up and efficiency of each row against the one-rank row of its study and case."""
    for r in rows:
        base = next(
            (
                b
                for b in rows
                if b["study"] == r["study"] and b["case"] == r["case"] and b["ranks"] == 1 and "error" not in b
            ),
            None,
        )
        if "error" in r or base is None:
            continue
        speed = base["wall_s"] / r["wall_s"]
        r["speed_up"] = speed
        work = r["elements"] / r["ranks"] / base["elements"]
        r["efficiency"] = speed * work if r["study"] == "weak" else speed / r["ranks"]
    return rows


def table(rows: list) -> str:
    lines = [
        "| study | case | ranks | elements | unknowns | Newton steps | Krylov its/step | wall s | speed-up "
        "| efficiency | data prep s | element matrices s | linear set-up s | solve s | communication share "
        "| messages (max rank) | MB sent (max rank) | imbalance | converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['study']} | {r['case']} | {r['ranks']} | failed: {r['error'][:80]} |" + " |" * 15)
            continue
        t = r["times_s"]
        traffic = [x for x in r["traffic"] if x]
        msgs = max((x["messages"] for x in traffic), default=0)
        mb = max((x["message_bytes"] for x in traffic), default=0) / 1e6
        imbalance = "" if not r["partition"] else f"{r['partition']['imbalance']:.2f}"
        speed = "" if "speed_up" not in r else f"{r['speed_up']:.2f}"
        eff = "" if "efficiency" not in r else f"{100 * r['efficiency']:.0f} %"
        lines.append(
            f"| {r['study']} | {r['case']} | {r['ranks']} | {r['elements']:,} | {r['unknowns']:,} "
            f"| {r['newton_steps']} "
            f"| {r['iterations_per_step']:.1f} | {r['wall_s']:.1f} | {speed} | {eff} | "
            + " | ".join(f"{t.get(p, 0.0):.1f}" for p in PHASES)
            + f" | {100 * r['communication_share']:.0f} % | {msgs:,} | {mb:.0f} | {imbalance} "
            f"| {'yes' if r['converged'] else 'no'} |"
        )
    return "\n".join(lines)


def markdown(meta: dict, rows: list) -> str:
    return (
        f"# Time to solution on several ranks ({meta['device']})\n\n`{meta['command']}`\n\n"
        f"Process wall time of `{meta['launcher']} -n P python ...` (one rank too), each after untimed 8^3 runs "
        "on P ranks (on a GPU with stored and with sum-factorised element matrices: kernels compiled); "
        "phases are rank 0's; communication share: the most any rank spent communicating over the run time."
        f"\n\n{table(rows)}\n"
    )


def main(argv=None) -> int:
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="rank counts (default 1 2 4)")
    ap.add_argument(
        "--strong", type=int, nargs="*", default=[64], help="cube sides of the strong-scaling runs (default 64)"
    )
    ap.add_argument(
        "--weak", type=int, nargs="*", default=[], help="elements per side per rank of the weak-scaling cubes"
    )
    ap.add_argument("--dfg", type=int, nargs="*", default=[], help="refinements of the DFG 3D-1Z case to run")
    ap.add_argument("--re", type=float, default=1000.0, help="Reynolds number of the cavity runs (default 1000)")
    ap.add_argument("--grading", type=float, default=1.0, help="grading of the cavity meshes (default 1)")
    ap.add_argument("--device", default="gpu", help="auto, cpu or gpu (default gpu)")
    ap.add_argument(
        "--launcher",
        default=os.environ.get("MPIEXEC", "mpiexec"),
        help="MPI launcher and its options (default mpiexec)",
    )
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu", help="suffix of the result files")
    args = ap.parse_args(argv)
    check_each("--ranks", args.ranks, 1, None, integer=True)
    for name in ("strong", "weak"):
        if getattr(args, name):
            check_each(f"--{name}", getattr(args, name), 2, None, integer=True)
    if args.dfg:
        check_each("--dfg", args.dfg, 0, 10, integer=True)
    if not (args.strong or args.weak or args.dfg):
        raise InputError("nothing to run: give --strong, --weak or --dfg sizes")
    check_tag(args.tag)
    stem = os.path.join(args.results, f"parallel_{args.tag}")
    meta = {
        "command": "python " + shlex.join(sys.argv),
        "launcher": args.launcher,
        "re": args.re,
        "grading": args.grading,
    }
    os.makedirs(args.results, exist_ok=True)

    def save(rows):
        ratios(rows)
        ok = [r for r in rows if "error" not in r]
        meta["device"] = ok[0]["device"] if ok else None
        text = markdown(meta, rows)
        write_record(stem, {"meta": meta, "rows": rows}, text)
        return text

    rows: list = []
    with tempfile.TemporaryDirectory() as runs:
        for p in args.ranks:
            warm = os.path.join(runs, f"warmup_p{p}")
            grid = (WARMUP_N, WARMUP_N, WARMUP_N * p)
            for assembly in ASSEMBLIES if args.device != "cpu" else ASSEMBLIES[:1]:  # NumPy compiles nothing
                wall, code, err = launch(args, p, cavity_args(args, grid) + ["--assembly", assembly], warm, WARMUP_ENV)
                if code != 0:
                    raise InputError(
                        f"the untimed run on {p} ranks failed (exit {code}): "
                        f"{err.strip().splitlines()[-1] if err.strip() else ''}"
                    )
        for n in args.strong:
            for p in args.ranks:
                one(args, "strong", f"{n}^3", p, cavity_args(args, (n, n, n)), runs, rows, save)
        for n in args.weak:
            for p in args.ranks:
                side = round(n * p ** (1 / 3))
                one(args, "weak", f"{n}^3 per rank", p, cavity_args(args, (side, side, side)), runs, rows, save)
        for k in args.dfg:
            for p in args.ranks:
                one(args, "dfg", f"refine {k}", p, dfg_args(args, k), runs, rows, save)
    print(save(rows))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="bench_parallel"))
