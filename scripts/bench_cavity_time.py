"""The cube cavity in time, past its Hopf bifurcation: steady below Re_c (about 1914-1920),
periodic above it, with the Strouhal number of the oscillation and its mesh and time-step study.

    python scripts/bench_cavity_time.py --device gpu --tag h200 --runs 2000:24:midpoint:0.2:600 2000:32:midpoint:0.2:400

Each run RE:N:SCHEME:DT:T_END is ``python -m fem3d.cavity --re RE --n N --grading 1 --t-end
T_END --dt DT --scheme SCHEME --device D --quiet --no-vtu --no-plots`` in its own process,
from rest, as a user runs it (after one untimed short run that compiles the kernels, unless
``--no-warmup``); ``--concurrent`` starts all runs at once, taking ``--gpus`` GPUs in turn
(their walls then share the devices: the record says so). A row per run: elements, unknowns, time step, steps,
Newton steps and Krylov iterations, seconds per step, the process wall time, and the
centre's x velocity u at the end: periodic (its period, Strouhal number f L / U_lid with the
cavity's side and lid speed 1, mean and amplitude over the last periods, from summary.json)
or not, its swing (max - min) over the last tenth of the run, the rate at which the swing
grows or decays (from the tenth before: below 0 a steady flow, where its oscillation dies
out at that rate per unit time) and the frequency of the highest peak of u's spectrum (that
of a decaying oscillation too). ``--add`` adds the rows to the saved record. The
references: Feldman & Gelfgat 2010 (Re_c 1914, omega 0.575 at onset), Kuhlmann & Albensoeder
2014 (Re_c 1919.5, St about 0.093 near onset). Saves benchmarks/results/cavity_unsteady_<tag>.{json,md}
after every run.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np

from fem3d.cavity import STROUHAL
from fem3d.problems.periodic import spectral_peak
from fem3d.solvers.time_stepping import SCHEMES
from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import saved_record, write_record
from script_options import check_tag
from timed_runs import time_row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMN = STROUHAL["of"]  # the centre's u
TAIL = 0.1  # the part of the run whose swing is measured, and the part before it


def parse_run(spec: str) -> dict:
    """{"re", "n", "scheme", "dt", "t_end"} of RE:N:SCHEME:DT:T_END; an input error otherwise."""
    parts = spec.split(":")
    try:
        re_, n, scheme, dt, t_end = float(parts[0]), int(parts[1]), parts[2], float(parts[3]), float(parts[4])
    except (ValueError, IndexError):
        raise InputError(f"--runs: {spec!r} is not RE:N:SCHEME:DT:T_END, e.g. 2000:24:midpoint:0.2:600") from None
    if len(parts) != 5 or scheme not in SCHEMES or not (re_ > 0 and n >= 2 and 0 < dt < t_end):
        raise InputError(f"--runs: {spec!r} needs RE > 0, N >= 2, SCHEME in {', '.join(SCHEMES)} and 0 < DT < T_END")
    return {"re": re_, "n": n, "scheme": scheme, "dt": dt, "t_end": t_end}


def argv_of(spec: dict, device: str, out: str) -> list[str]:
    """fem3d.cavity's arguments for ``spec``."""
    return [
        *("--re", f"{spec['re']:g}", "--n", str(spec["n"]), "--grading", "1"),
        *("--t-end", f"{spec['t_end']:g}", "--dt", f"{spec['dt']:g}", "--scheme", spec["scheme"]),
        *("--device", device, "--quiet", "--no-vtu", "--no-plots", "--out", out),
    ]


def oscillation(history: str) -> dict:
    """The centre's u over the run: its swing (max - min) over the last TAIL of the run's time
    and over the TAIL before it, the rate ln(last / before) / (TAIL t_end) at which the swing
    grows (> 0) or decays (< 0) per unit time, and the frequency of the highest peak of u's
    spectrum over the last half of the run (fem3d.problems.periodic.spectral_peak)."""
    with open(history) as fh:
        rows = [(float(r["t"]), float(r[COLUMN])) for r in csv.DictReader(fh)]
    t, u = np.array(rows).T
    t_end = t[-1]

    def swing(a, b):
        values = u[(t > a) & (t <= b)]
        return float(np.ptp(values)) if len(values) else float("nan")

    last, before = swing(t_end * (1 - TAIL), t_end), swing(t_end * (1 - 2 * TAIL), t_end * (1 - TAIL))
    peak = spectral_peak(t, u)
    frequency = None if peak is None else peak["frequency"]
    rate = np.log(last / before) / (TAIL * t_end) if last > 0 and before > 0 else None
    return {"u_swing_last": last, "u_swing_before": before, "u_rate": rate, "u_frequency": frequency}


def row_of(spec: dict, command: str, wall: float, folder: str) -> dict:
    """What a run measured, from its summary.json and history.csv."""
    with open(os.path.join(folder, "summary.json")) as fh:
        s = json.load(fh)
    t = s["time"]
    found = t["periodic"].get(COLUMN)
    return {
        **time_row(spec, command, wall, s),
        "strouhal": t["strouhal"]["value"],
        "period": found and found["period"],
        "u_mean": found and found["mean"],
        "u_amplitude": found and found["amplitude"],
        **oscillation(os.path.join(folder, "history.csv")),
        "u_end": t["series"][COLUMN]["end"],
    }


def start(args, spec: dict, t_end: float | None = None, gpu: int | None = None) -> tuple:
    """The process of one run of ``spec`` (to ``t_end`` where given; on GPU ``gpu`` alone where
    given), its command and output folder; its error output goes to the folder's name + .stderr."""
    spec = {**spec, "t_end": t_end or spec["t_end"]}
    name = f"re{spec['re']:g}_n{spec['n']}_{spec['scheme']}_dt{spec['dt']:g}"
    folder = os.path.join(os.path.abspath(args.runs_folder), name)
    os.makedirs(args.runs_folder, exist_ok=True)
    argv = argv_of(spec, args.device, folder)
    command = "python -m fem3d.cavity " + " ".join(argv)
    print(command, flush=True)
    env = os.environ if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    with open(folder + ".stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fem3d.cavity", *argv], stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    return proc, command, folder


def ended(started: list, t0: float):
    """Yield (index, process wall in s) of each process of ``started`` [(process, ...)] as it
    ends, timed from ``t0``."""
    pending = set(range(len(started)))
    while pending:
        for i in sorted(pending):
            if started[i][0].poll() is not None:
                pending.discard(i)
                yield i, time.perf_counter() - t0
        time.sleep(0.05)


def finish(spec: dict, proc, command: str, folder: str, wall: float, concurrent: int) -> dict:
    """The row of a run whose process ended after ``wall`` s (or a row with the error)."""
    if proc.returncode != 0:
        with open(folder + ".stderr") as fh:
            lines = fh.read().strip().splitlines() or ["no error output"]
        return {**spec, "command": command, "error": f"exit {proc.returncode}: {lines[-1]}"}
    return {**row_of(spec, command, wall, folder), "concurrent_runs": concurrent}


def shown(v, digits: int) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def table(rows: list) -> str:
    lines = [
        "| Re | n | elements | unknowns | scheme | dt | t_end | steps | Krylov / Newton | s / step | wall s "
        "| St | period | u mean | u amplitude | u swing | swing's rate | u's peak frequency |",
        "|" + "---|" * 18,
    ]
    for r in rows:
        head = f"| {r['re']:g} | {r['n']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error']} |" + " |" * 15)
            continue
        lines.append(
            head + f"| {r['elements']:,} | {r['unknowns']:,} | {r['scheme']} | {r['dt']:g} | {r['t_end']:g} "
            f"| {r['steps']} | {r['linear_iterations_per_newton_step']:.2f} | {r['seconds_per_step']:.3f} "
            f"| {shown(r['wall_s'], 1)} | {shown(r['strouhal'], 4)} | {shown(r['period'], 3)} "
            f"| {shown(r['u_mean'], 5)} | {shown(r['u_amplitude'], 5)} | {r['u_swing_last']:.2e} "
            f"| {shown(r['u_rate'], 4)} | {shown(r['u_frequency'], 4)} |"
        )
    return "\n".join(lines)


def page(rows: list, commands: list) -> str:
    """The record's Markdown: the commands, what the columns mean, the table."""
    device = next((r["device"] for r in rows if "device" in r), "n/a")
    return (
        f"# The cube cavity in time ({device})\n\n"
        + "".join(f"`{c}`\n\n" for c in commands)
        + "Each command after one untimed short run unless it says --no-warmup; runs started together share "
        "their GPUs (JSON: concurrent_runs, their walls shared); from rest, graded meshes (--grading 1); wall s: "
        "the process's (n/a: not measured). St = f L / U_lid of the centre's u over its last periods (n/a: not "
        "periodic at the end); "
        f"u swing: max - min of u over the last {TAIL:.0%} of the run; its rate: ln(swing / the swing over the "
        f"{TAIL:.0%} before) / ({TAIL:g} t_end), > 0 growing, < 0 decaying; u's peak frequency: of its spectrum "
        "over the last half of the run. Onset of the oscillation: Re_c 1914 (Feldman & Gelfgat 2010) to 1919.5 "
        "(Kuhlmann & Albensoeder 2014), St about 0.093 near onset.\n\n" + table(rows) + "\n"
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="scripts/bench_cavity_time.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="RE:N:SCHEME:DT:T_END, e.g. 2000:24:midpoint:0.2:600")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--concurrent", action="store_true", help="start all runs at once")
    ap.add_argument("--gpus", type=int, default=1, help="with --concurrent, the GPUs the runs take in turn (default 1)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first short run")
    ap.add_argument("--runs-folder", default="bench-cavity-time", help="folder for the runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", required=True, help="suffix of the result files, e.g. cpu or h200")
    ap.add_argument("--add", action="store_true", help="add the rows to the tag's saved record")
    args = ap.parse_args(argv)
    specs = [parse_run(r) for r in args.runs]
    if args.gpus < 1 or (args.gpus > 1 and not args.concurrent):
        raise InputError(f"--gpus must be >= 1, and above 1 only with --concurrent (got {args.gpus})")
    base = os.path.join(args.results, f"cavity_unsteady_{check_tag(args.tag)}")
    if args.add and not os.path.exists(base + ".json"):
        raise InputError(f"--add: no saved record {base}.json")
    saved, commands = saved_record(base) if args.add else ([], [])
    commands.append("python scripts/bench_cavity_time.py " + " ".join(argv))
    if not args.no_warmup:
        start(args, specs[0], t_end=2 * specs[0]["dt"])[0].wait()
    width = len(specs) if args.concurrent else 1
    rows = []
    for first in range(0, len(specs), width):
        group = specs[first : first + width]
        t0 = time.perf_counter()
        gpus = [None] * len(group) if args.gpus == 1 else [i % args.gpus for i in range(len(group))]
        started = [start(args, spec, gpu=gpu) for spec, gpu in zip(group, gpus)]
        for i, wall in ended(started, t0):
            rows.append(finish(group[i], *started[i], wall, width))
            write_record(
                base, {"commands": commands, "column": COLUMN, "rows": saved + rows}, page(saved + rows, commands)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/bench_cavity_time.py"))
