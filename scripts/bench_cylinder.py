"""Run time of the square-cylinder time step per line solver and grid, against the CPU (the paper's Fig. 19).

For every grid (ny x nx cells) it times, from the same start (the undisturbed channel flow with
the start-up vortex blob, Re --re, the default unsteady Δt): --steps steps of every --solvers
entry on --device after --warmup steps, then --cpu-steps steps of serial NumPy Thomas on the
CPU (the baseline; ψ₁ of --body pressure taken from the device runs) (the device synchronised
around the timed loop; no residual checks inside it).
Speed-up = CPU seconds per step / device seconds per step. Writes cylinder_bench[_TAG].json and
.md to --out-dir, rewritten after every grid.

  python scripts/bench_cylinder.py --device gpu --tag h100                 # the paper's grids
  python scripts/bench_cylinder.py --grids 32x200 --steps 5 --device cpu   # a CPU smoke run
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from gpucfd.backend import get_backend, resolve_dtype
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir, write_json

from script_options import check_line_solvers, check_tag
from tridiag.cases.channel import GRIDS, Channel, parse_grid
from tridiag.cases.cli import MAX_PSI_SWEEPS, MAX_STEPS, RE_RANGE
from tridiag.cases.cylinder import largest_grid
from tridiag.cases.cylinder_flow import BODY, CFL, HOST_ARRAYS, CylinderFlow, default_dt, field_arrays
from tridiag.cases.line_solver import NAMES
from tridiag.cases.memory import check_fits

KICK = 0.5
DEVICE_SOLVERS = ("fused", "pta", "pta:contiguous", "cr", "pcr", "hybrid", "tuned")


def parse(argv):
    ap = ArgumentParser(prog="scripts/bench_cylinder.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--grids", default=",".join(GRIDS), help=f"ny x nx cells, comma-separated (default {','.join(GRIDS)})"
    )
    ap.add_argument(
        "--solvers",
        default=",".join(DEVICE_SOLVERS),
        help=f"line solvers, SOLVER or SOLVER:LAYOUT, SOLVER any of {','.join(NAMES)} (default "
        f"{','.join(DEVICE_SOLVERS)}; pta:contiguous is the paper's uncoalesced storage; thomas on "
        "the GPU is the vectorised reference, a loop over the rows: 0.55 s per step at 160x800)",
    )
    ap.add_argument("--steps", type=int, default=100, help="timed steps per solver (default 100)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    ap.add_argument("--cpu-steps", type=int, default=3, help="timed steps of the NumPy Thomas baseline (default 3)")
    ap.add_argument("--re", type=float, default=100.0, help="Reynolds number (default 100)")
    ap.add_argument("--psi-sweeps", type=int, default=2, help="psi ADI sweeps per step (default 2)")
    ap.add_argument("--body", default="pressure", help="the cylinder's psi: pressure or fixed (default pressure)")
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto)")
    ap.add_argument("--dtype", default="float64", help="float64 or float32 (default float64)")
    ap.add_argument("--tag", default="", help="suffix of the result files, e.g. h100")
    ap.add_argument("--out-dir", default="benchmarks/results", help="where the results go (default benchmarks/results)")
    return ap.parse_args(argv)


def time_steps(backend, channel, args, solver, steps, warmup, dtype, body_field=None, layout="auto") -> tuple:
    """(seconds per step of ``solver`` on ``backend`` from one timed loop of ``steps``, the flow)."""
    dt = default_dt(channel, CFL["unsteady"], args.re)
    flow = CylinderFlow(
        backend,
        channel,
        args.re,
        dt,
        solver,
        args.psi_sweeps,
        dtype,
        body=args.body,
        body_field=body_field,
        layout=layout,
    )
    flow.kick(KICK)
    flow.advance(warmup)
    while not flow.core.replays(steps):  # the fused sweeps' CUDA graph of the timed block, captured untimed
        flow.advance(steps)
    launches = flow.core.launches_per_step(steps)
    backend.synchronize()
    t0 = time.perf_counter()
    flow.advance(steps)
    backend.synchronize()
    seconds = (time.perf_counter() - t0) / steps
    flow.check_cfl()
    if not np.isfinite(float(abs(flow.omega).max())):
        raise ConvergenceError(
            f"{solver} on {channel.grid.ny - 1}x{channel.grid.nx - 1}: fields not finite after the timed steps",
            "diverged",
        )
    return seconds, flow, launches


def write_results(args, summary) -> None:
    tag = f"_{args.tag}" if args.tag else ""
    base = os.path.join(args.out_dir, f"cylinder_bench{tag}")
    write_json(base + ".json", summary)
    lines = [
        "# Square cylinder time step: run time per step and speed-up vs the CPU (paper Fig. 19)",
        "",
        f"Device {summary['device']}; CPU baseline: serial NumPy Thomas on {summary['cpu']}. Re {args.re:g}, "
        f"{args.dtype}, {args.psi_sweeps} ψ sweeps per step, cylinder ψ {args.body}, {args.steps} timed steps "
        f"({args.cpu_steps} on the CPU).",
        "",
        "Kernel launches per step: those of the CUDA graph the fused sweeps replay (counted in its DOT "
        "description); the other solvers launch from the host.",
        "",
        "| grid (cells) | nodes | solver | ms per step | kernel launches per step | CPU ms per step | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in summary["grids"]:
        for r in g["solvers"]:
            launches = "" if r["launches_per_step"] is None else f"{r['launches_per_step']:g}"
            lines.append(
                f"| {g['grid']} | {g['nodes']} | {r['solver']} | {1e3 * r['seconds_per_step']:.3f} | {launches} | "
                f"{1e3 * g['cpu_seconds_per_step']:.2f} | {r['speedup']:.1f} |"
            )
    with open(base + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    grids = [parse_grid(g, "--grids") for g in args.grids.split(",")]
    solvers = check_line_solvers("--solvers", args.solvers.split(","))
    for name, low, high in (
        ("steps", 1, MAX_STEPS),
        ("warmup", 0, MAX_STEPS),
        ("cpu_steps", 1, MAX_STEPS),
        ("psi_sweeps", 1, MAX_PSI_SWEEPS),
    ):
        check_range("--" + name.replace("_", "-"), getattr(args, name), low, high, integer=True)
    check_range("--re", args.re, *RE_RANGE)
    if args.body not in BODY:
        raise InputError(f"--body must be one of {', '.join(BODY)} (got {args.body!r})")
    dtype = resolve_dtype(args.dtype)
    check_tag(args.tag)
    backend, cpu = get_backend(args.device), get_backend("cpu")
    ny, nx = max(grids, key=lambda g: g[0] * g[1])
    for b in (backend, cpu) if backend.is_gpu else (cpu,):  # the CPU baseline runs every grid too
        check_fits(
            b,
            (ny + 1) * (nx + 1),
            field_arrays(dtype, args.body),
            dtype,
            HOST_ARRAYS,
            f"--grids {ny}x{nx} ({args.dtype})",
            largest_grid,
        )
    ensure_writable_dir(args.out_dir, "--out-dir")
    summary = {
        "device": backend.describe(),
        "cpu": cpu.describe(),
        "re": args.re,
        "dtype": args.dtype,
        "body": args.body,
        "psi_sweeps": args.psi_sweeps,
        "steps": args.steps,
        "cpu_steps": args.cpu_steps,
        "grids": [],
        "command": " ".join(["python scripts/bench_cylinder.py", *(argv or sys.argv[1:])]),
    }
    for ny, nx in grids:
        channel = Channel.create(ny, nx)
        field = None  # ψ₁ of the first device run, reused (its solve is a one-off set-up, slow on the CPU)
        rows = []
        for solver, name, layout in solvers:
            seconds, flow, launches = time_steps(
                backend, channel, args, name, args.steps, args.warmup, dtype, field, layout
            )
            field = flow.body.psi1 if flow.body is not None else None
            rows.append({"solver": solver, "seconds_per_step": seconds, "launches_per_step": launches})
            print(f"{ny}x{nx} {solver}: {1e3 * seconds:.3f} ms/step on {backend.kind}", flush=True)
        cpu_step = time_steps(cpu, channel, args, "thomas", args.cpu_steps, 1, dtype, field)[0]
        entry = {
            "grid": f"{ny}x{nx}",
            "nodes": channel.grid.nx * channel.grid.ny,
            "cpu_seconds_per_step": cpu_step,
            "solvers": [],
        }
        print(f"{ny}x{nx}: CPU NumPy thomas {1e3 * cpu_step:.2f} ms/step", flush=True)
        for row in rows:
            row["speedup"] = cpu_step / row["seconds_per_step"]
            entry["solvers"].append(row)
            print(
                f"  {row['solver']:12s} {1e3 * row['seconds_per_step']:9.3f} ms/step  speed-up {row['speedup']:6.1f}",
                flush=True,
            )
        summary["grids"].append(entry)
        write_results(args, summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/bench_cylinder.py"))
