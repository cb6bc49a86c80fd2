"""Benchmark of the unsteady ADI (Wei et al. 2013's case): time per step per line solver and layout.

For each n² (float32 by default; Δx = Δt = 0.01, r = 100, the hot-plate start of
tridiag.cases.heat_unsteady) and each line solver × --layouts (the fused solver once): ms per ADI
step (median of CUDA-event samples of back-to-back steps from Python; and the same steps captured in a CUDA graph and
replayed: the device time without launch overhead), the total for --steps steps, the
bytes a step moves (the sweep's passes() × n² itemsize: library 15 natural, 17 with a transpose; fused 5)
as GB/s and as a fraction of a device-to-device copy measured in
this run, the speed-up over the serial CPU ADI (tridiag.cases.heat_unsteady.serial_cpu_run: NumPy
Thomas vectorised over the lines, one core; timed over --cpu-steps steps in this run), the
relative L2 error against the exact decay and, up to --accuracy-max, eq. 10 of the paper
(GPU against the serial CPU result after --steps steps). Writes adi_bench<tag>.json/.md.

  python scripts/bench_adi.py --device gpu                                # full run (GPU)
  python scripts/bench_adi.py --sizes 64 --steps 2 --device cpu --tag _cpu   # smoke test
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench_tridiag import copy_bandwidth, time_graph
from gpucfd.backend import get_backend, resolve_dtype
from gpucfd.errors import ArgumentParser, check_range, run_cli
from gpucfd.output import ensure_writable_dir
from script_options import check_each, check_names, check_tag
from tridiag.cases.cli import MAX_STEPS
from tridiag.cases.heat import HOST_ARRAYS, SOLVE_ARRAYS, check_decay
from tridiag.cases.heat_unsteady import initial_field, relative_l2, run_unsteady, serial_cpu_run
from tridiag.cases.line_solver import FUSED, ITERATIVE, LAYOUTS, NAMES
from tridiag.cases.memory import check_fits
from tridiag.cases.peaceman_rachford import make_adi

SIZES = (1024, 2048, 4096, 8192)
SOLVERS = ("fused", "hybrid", "pcr", "pta", "thomas", "tuned")
LAYOUT_CHOICES = ("natural", "contiguous")
DX = DT = 0.01
FULL_RUN_SECONDS = 5.0  # a configuration slower than this for --steps steps is extrapolated


def time_steps(backend, adi, t, rho, repeat):
    """(ms per step back-to-back, ms per step replayed from a CUDA graph or None, steps per sample)."""
    step = lambda: adi.sweep(t, rho)  # noqa: E731
    step()
    single = backend.time_call(step, repeat=1, warmup=0)
    calls = int(min(50, max(1, 0.02 / single)))
    repeat = repeat if single < 0.2 else 2  # slow configurations (thomas on the GPU) cost the budget
    ms = backend.time_call(lambda: [step() for _ in range(calls)], repeat=repeat, warmup=0) / calls * 1e3
    graph = time_graph(backend, step, calls, repeat) if backend.is_gpu and single < 0.05 else None
    return ms, None if graph is None else graph * 1e3, calls


def bench_size(backend, n, dtype, args, copy_gbs):
    xp = backend.xp
    r = DT / (DX * DX)
    host0 = initial_field(np, n, dtype, DX)
    cpu_ms, cpu_field = None, None
    if n <= args.cpu_max:
        t0 = time.perf_counter()
        serial_cpu_run(host0, args.cpu_steps, r)
        cpu_ms = (time.perf_counter() - t0) / max(1, args.cpu_steps) * 1e3
        print(f"  serial CPU ADI {cpu_ms:10.2f} ms/step", flush=True)
    if n <= args.accuracy_max:
        cpu_field = serial_cpu_run(host0, args.steps, r)
    rows = []
    for solver in args.solvers:
        for layout in ["auto"] if solver == FUSED else args.layouts:
            row = dict(n=n, dtype=dtype.name, solver=solver, layout=layout)
            try:
                adi = make_adi(xp, (n, n), dtype, solver, DX, DX, layout=layout)
                t = xp.asarray(host0)
                ms, graph, calls = time_steps(backend, adi, t, 2 / DT, args.repeat)
                nbytes = adi.passes() * n * n * dtype.itemsize
                row.update(solved_by=adi.describe(), ms=ms, ms_graph=graph, calls=calls, bytes_per_step=nbytes)
                del adi, t
                best = graph or ms
                gbs = nbytes / best * 1e-6
                row.update(
                    gbs=gbs,
                    copy_fraction=gbs / copy_gbs if copy_gbs else None,
                    speedup=cpu_ms / ms if cpu_ms else None,
                    total_s=ms * args.steps / 1e3,
                    total_measured=False,
                )
                if ms * args.steps / 1e3 <= FULL_RUN_SECONDS:
                    res = run_unsteady(backend, n, args.steps, dtype, solver, layout, DX, DT)
                    row.update(
                        total_s=res["seconds"],
                        total_measured=True,
                        error_exact=res["error_exact"],
                        eq10=None if cpu_field is None else relative_l2(res["field"], cpu_field),
                    )
                print(
                    f"  {solver:7s} {layout:10s} {ms:9.3f} ms/step"
                    + (f" graph {graph:8.3f}" if graph else "")
                    + f" {row['gbs']:7.0f} GB/s"
                    + (f" {row['copy_fraction']:6.1%}" if row["copy_fraction"] else "")
                    + (f" x{row['speedup']:.0f}" if row["speedup"] else "")
                    + (f" err {row['error_exact']:.2e}" if "error_exact" in row else "")
                    + (f" eq10 {row['eq10']:.2e}" if row.get("eq10") is not None else ""),
                    flush=True,
                )
            except Exception as exc:  # one failing configuration must not stop the benchmark
                row["error"] = repr(exc)
                print(f"  {solver:7s} {layout:10s} ERROR {exc!r}", flush=True)
            row["cpu_ms"] = cpu_ms
            rows.append(row)
            if backend.is_gpu:
                xp.get_default_memory_pool().free_all_blocks()
    return rows


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def markdown(meta, rows):
    lines = [
        f"# ADI benchmark ({meta['device']})",
        "",
        f"{meta['date']}; command `{meta['command']}`; {meta['steps']} steps, Δx = Δt = 0.01 (r = 100), "
        f"copy bandwidth {_fmt(meta['copy_gbs'], '.0f')} GB/s. ms/step: back-to-back steps from Python "
        "(CUDA events); graph: the same steps replayed from a CUDA graph. GB/s and % copy over the bytes a "
        "step reads and writes (library sweeps 15 n² itemsize natural, 17 with a transpose; fused 5; graph "
        "time where there is one). "
        "Speed-up: serial CPU ADI ms/step (NumPy Thomas "
        "vectorised over the lines, one core, same machine and run) over ms/step. Total: seconds for all "
        "steps (est. = ms/step × steps). err: relative L2 against the exact decay; eq. 10: against the "
        "serial CPU result.",
        "",
        "| n² | solver | layout | solved by (x / y lines) | ms/step | graph ms | total s | GB/s | % copy "
        "| CPU ms/step | speed-up | err vs exact | eq. 10 |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['n']} | {r['solver']} | {r['layout']} | error: {r['error'][:80]} |||||||||")
            continue
        by = r["solved_by"]
        total = _fmt(r["total_s"], ".3g") + ("" if r["total_measured"] else " est.")
        frac = _fmt(r["copy_fraction"] and 100 * r["copy_fraction"], ".0f")
        lines.append(
            f"| {r['n']} | {r['solver']} | {r['layout']} | {by} | {r['ms']:.4g} | {_fmt(r['ms_graph'], '.4g')} "
            f"| {total} | {r['gbs']:.0f} | {frac} | {_fmt(r['cpu_ms'], '.4g')} | {_fmt(r['speedup'], '.0f')} "
            f"| {_fmt(r.get('error_exact'), '.2e')} | {_fmt(r.get('eq10'), '.2e')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = ArgumentParser(prog="scripts/bench_adi.py", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="n (nodes per side)")
    p.add_argument("--solvers", nargs="+", default=list(SOLVERS))
    p.add_argument(
        "--layouts",
        nargs="+",
        choices=tuple(LAYOUTS),
        default=list(LAYOUT_CHOICES),
        help="layouts of the library solvers (default natural contiguous)",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="gpu", help="gpu (default), cpu or auto")
    p.add_argument("--steps", type=int, default=100, help="steps of the full runs (accuracy, totals)")
    p.add_argument("--cpu-steps", type=int, default=2, help="steps timed for the serial CPU baseline")
    p.add_argument("--cpu-max", type=int, default=8192, help="largest n with a CPU baseline")
    p.add_argument("--accuracy-max", type=int, default=1024, help="largest n with the CPU run of eq. 10")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--tag", default="", help="suffix of the result file names")
    args = p.parse_args(argv)
    check_each("--sizes", args.sizes, 3, integer=True)
    check_names("--solvers", args.solvers, tuple(m for m in NAMES if m not in ITERATIVE))
    dtype = resolve_dtype(args.dtype)
    check_range("--steps", args.steps, 1, MAX_STEPS, integer=True)
    check_range("--cpu-steps", args.cpu_steps, 1, MAX_STEPS, integer=True)
    for name in ("cpu_max", "accuracy_max"):
        check_range("--" + name.replace("_", "-"), getattr(args, name), 0, integer=True)
    check_range("--repeat", args.repeat, 1, 1000, integer=True)
    check_tag(args.tag)
    check_decay(min(args.sizes), args.steps, DX, DT)
    backend = get_backend(args.device)
    n = max(args.sizes)
    check_fits(
        backend,
        n * n,
        SOLVE_ARRAYS + 2,
        dtype,
        HOST_ARRAYS["unsteady"] + HOST_ARRAYS["compare-cpu"],
        f"--sizes {n} ({args.dtype})",
        lambda nodes: f"--sizes {math.isqrt(nodes)}",
    )
    ensure_writable_dir(args.out)
    copy_gbs = copy_bandwidth(backend, 1 << 30) if backend.is_gpu else None
    print(f"{backend.describe()}; copy bandwidth {_fmt(copy_gbs, '.0f')} GB/s", flush=True)
    rows = []
    for n in args.sizes:
        print(f"n = {n} ({args.dtype})", flush=True)
        rows += bench_size(backend, n, dtype, args, copy_gbs)
    meta = dict(
        device=backend.describe(),
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        command="python " + " ".join(sys.argv),
        copy_gbs=copy_gbs,
        steps=args.steps,
        python=platform.python_version(),
        dtype=args.dtype,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"adi_bench{args.tag}.json").write_text(json.dumps(dict(meta=meta, results=rows), indent=1, default=str))
    text = markdown(meta, rows)
    (out / f"adi_bench{args.tag}.md").write_text(text)
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_adi.py"))
