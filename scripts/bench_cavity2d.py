"""Time the 2D lid-driven cavity iteration for every line solver, like Souri et al. 2020, Figs. 11–12.

    python scripts/bench_cavity2d.py --device gpu --tag h100         # 64^2 ... 1024^2, 1000 iterations
    python scripts/bench_cavity2d.py --sizes 32 --iterations 5 --device cpu

For each grid of n × n cells: the serial CPU baseline (NumPy Thomas, vectorised over the
lines of a sweep, one process) is timed over --cpu-iterations iterations (default: all up to
128², fewer above) and scaled to --iterations; then every --solvers entry runs --iterations
iterations of tridiag.cases.cavity2d (Re 1000 by default, the paper's case) on --device after two
warm-up iterations (compilation, autotuning), timed with the device synchronised. Writes
benchmarks/results/cavity2d_bench_<tag>.{json,md} with seconds and speed-ups vs the CPU.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpucfd.backend import get_backend, resolve_dtype  # noqa: E402
from gpucfd.errors import ArgumentParser, check_range, run_cli  # noqa: E402
from gpucfd.output import ensure_writable_dir  # noqa: E402
from script_options import check_each, check_line_solvers, check_tag  # noqa: E402
from tridiag.cases.cavity2d_problem import ARRAYS, HOST_ARRAYS, cavity  # noqa: E402
from tridiag.cases.cli import MAX_STEPS, RE_RANGE  # noqa: E402
from tridiag.cases.memory import check_fits  # noqa: E402

PAPER = (
    "Souri et al. 2020 (GTX 580 vs Core i7 990x): 1024^2, 1000 iterations, CPU Thomas 331.73 s, PTA 8.6 s (38.5x); "
    "CR 4.4x, PCR 5.2x"
)


def timed(backend, n, re, solver, layout, iterations, dtype, warmup=2):
    """Seconds for ``iterations`` steps (after ``warmup``, and with fused sweeps after the CUDA
    graph of the timed block is captured) and whether the fields stayed finite."""
    vs, psi, omega = cavity(backend, n, re, solver=solver, dtype=dtype, layout=layout)

    def step():
        vs.step(psi, omega)

    vs.advance(warmup, step)
    while not vs.replays(iterations):
        vs.advance(iterations, step)
    launches = vs.launches_per_step(iterations)
    backend.synchronize()
    t0 = time.perf_counter()
    vs.advance(iterations, step)
    backend.synchronize()
    seconds = time.perf_counter() - t0
    finite = bool(np.isfinite(vs.residuals(psi, omega)["residual"]))
    return seconds, finite, launches


def cpu_iterations(n, iterations, given):
    if given:
        return min(given, iterations)
    return iterations if n <= 128 else min(iterations, {256: 100, 512: 20}.get(n, 10))


def main(argv=None):
    ap = ArgumentParser(prog="scripts/bench_cavity2d.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512, 1024], help="cells per side")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument(
        "--cpu-iterations", type=int, default=0, help="iterations timed on the CPU, scaled (default: by size)"
    )
    ap.add_argument(
        "--solvers",
        nargs="+",
        default=["fused", "pta", "pta:contiguous", "cr", "pcr", "hybrid", "tuned"],
        help="line solvers, SOLVER or SOLVER:LAYOUT (pta:contiguous is the paper's uncoalesced storage)",
    )
    ap.add_argument("--re", type=float, default=1000.0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default=None, help="suffix of the result files (default: device)")
    args = ap.parse_args(argv)
    check_each("--sizes", args.sizes, 4, integer=True)
    check_range("--iterations", args.iterations, 1, MAX_STEPS, integer=True)
    check_range("--cpu-iterations", args.cpu_iterations, 0, MAX_STEPS, integer=True)
    choices = check_line_solvers("--solvers", args.solvers)
    check_range("--re", args.re, *RE_RANGE)
    dtype = resolve_dtype(args.dtype)
    check_tag(args.tag or "")
    device = get_backend(args.device)
    cpu = get_backend("cpu")
    n = max(args.sizes)
    for backend in (device, cpu) if device.is_gpu else (cpu,):  # the CPU baseline runs every size too
        check_fits(
            backend,
            (n + 1) ** 2,
            ARRAYS,
            dtype,
            HOST_ARRAYS,
            f"--sizes {n} ({args.dtype})",
            lambda nodes: f"--sizes {math.isqrt(nodes) - 1}",
        )
    ensure_writable_dir(args.results, "--results")
    rows = []
    for n in args.sizes:
        k = cpu_iterations(n, args.iterations, args.cpu_iterations)
        seconds, finite, _ = timed(cpu, n, args.re, "thomas", "auto", k, dtype)
        base = seconds * args.iterations / k
        rows.append(
            {
                "n": n,
                "solver": "thomas (CPU)",
                "device": cpu.describe(),
                "iterations_timed": k,
                "seconds": base,
                "ms_per_iteration": 1e3 * seconds / k,
                "speedup": 1.0,
                "finite": finite,
            }
        )
        print(f"{n:5d}^2  thomas (CPU)  {base:9.3f} s for {args.iterations} iterations ({k} timed)", flush=True)
        for solver, name, layout in choices:
            seconds, finite, launches = timed(device, n, args.re, name, layout, args.iterations, dtype)
            rows.append(
                {
                    "n": n,
                    "solver": solver,
                    "device": device.describe(),
                    "iterations_timed": args.iterations,
                    "seconds": seconds,
                    "ms_per_iteration": 1e3 * seconds / args.iterations,
                    "speedup": base / seconds,
                    "finite": finite,
                    "launches_per_iteration": launches,
                }
            )
            print(f"{n:5d}^2  {solver:12s}  {seconds:9.3f} s  speed-up {base / seconds:7.1f}x", flush=True)
    command = " ".join(["python scripts/bench_cavity2d.py", *sys.argv[1:]])
    solvers = ["thomas (CPU)", *args.solvers]
    lines = [
        f"# 2D cavity, Re {args.re:g}, {args.iterations} iterations, {args.dtype}: "
        "seconds (speed-up vs the CPU Thomas)",
        "",
        f"`{command}`",
        "",
        f"Device: {device.describe()}; CPU baseline: {cpu.describe()}, one process.",
        "",
        f"Paper: {PAPER}.",
        "",
        "| cells | " + " | ".join(solvers) + " |",
        "|---|" + "---:|" * len(solvers),
    ]
    for n in args.sizes:
        cells = {r["solver"]: r for r in rows if r["n"] == n}
        lines.append(
            f"| {n}² | "
            + " | ".join(f"{cells[s]['seconds']:.3g} s ({cells[s]['speedup']:.1f}×)" for s in solvers)
            + " |"
        )
    graphs = sorted({(r["solver"], r["launches_per_iteration"]) for r in rows if r.get("launches_per_iteration")})
    if graphs:
        lines += [
            "",
            "Kernel launches per iteration in the replayed CUDA graph: "
            + ", ".join(f"{name} {count:g}" for name, count in graphs)
            + ".",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    tag = args.tag or ("gpu" if device.is_gpu else "cpu")
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, f"cavity2d_bench_{tag}.json"), "w") as fh:
        json.dump(
            {
                "command": command,
                "re": args.re,
                "iterations": args.iterations,
                "dtype": args.dtype,
                "paper": PAPER,
                "rows": rows,
            },
            fh,
            indent=1,
        )
    with open(os.path.join(args.results, f"cavity2d_bench_{tag}.md"), "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_cavity2d.py"))
