"""Strong and weak scaling of the distributed solver: CG time per iteration on 1, 2, 4 ... ranks.

Strong scaling: one N^3 lid-driven cavity (default 64^3 elements, 6.7 M unknowns) on P
ranks, speed-up t_1 / t_P. Weak scaling: N^3 elements per rank (a box N x N x N P cut
into P slabs), efficiency t_1 / t_P. Each run assembles the Picard system of the
cavity once (Re 400, about the initial guess), computes the Jacobi preconditioner,
then times a fixed number of normal-equations CG iterations (each: A x, A^T y with
their interface sums, one fused reduction), with the time each rank spent
communicating. One A and one A^T product are timed alone too.

    python scripts/bench_scaling.py --ranks 1 2 4 --device gpu --launcher "mpirun --allow-run-as-root"

The driver starts one run per rank count (P = 1 without a launcher), collects what
rank 0 of each wrote and saves benchmarks/results/scaling_<tag>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER_STRONG = "Kao & Sheu 2018: 1.12x from 2 to 4 P100 GPUs"


def worker(args) -> None:
    """One run, on every rank of the job: writes rank 0's results to args.json."""
    from fem3d.parallel.comm import setup
    from fem3d.problems.distributed import partitioned_system
    from fem3d.solvers.krylov import NormalEquationsCG, NormalJacobi
    from fem3d.discretisation.mesh import box_mesh
    from fem3d.parallel.partition import distribute
    from fem3d.problems.lid_driven import lid_driven_problem

    backend, comm = setup(args.device, args.comm)
    t0 = time.perf_counter()
    mesh = box_mesh(args.nx, args.ny, args.nz)
    problem = lid_driven_problem(mesh, args.re, "y=1")
    part = distribute(mesh, comm, backend)
    system = partitioned_system(problem, part, backend)
    t_setup = time.perf_counter() - t0
    op, xp = system.op, system.xp
    x = system.initial_guess()
    backend.synchronize()
    t0 = time.perf_counter()
    b = system.assemble(x, "picard").residual
    backend.synchronize()
    t_assemble = time.perf_counter() - t0
    t0 = time.perf_counter()
    jacobi = NormalJacobi()
    jacobi.setup(op)
    backend.synchronize()
    t_diag = time.perf_counter() - t0
    y = xp.empty_like(x)
    t_a = backend.time_call(lambda: op.matvec(x, y), repeat=5, warmup=2)
    t_at = backend.time_call(lambda: op.rmatvec(x, y), repeat=5, warmup=2)
    NormalEquationsCG(1e-300, 5, 5).solve(op, b, xp.zeros_like(x), jacobi)  # warm-up
    comm_before = comm.seconds
    backend.synchronize()
    t0 = time.perf_counter()
    info = NormalEquationsCG(1e-300, args.iterations, args.iterations).solve(op, b, xp.zeros_like(x), jacobi)
    backend.synchronize()
    t_cg = time.perf_counter() - t0
    mine = {
        "rank": comm.rank,
        "elements": part.mesh.n_elements,
        "unknowns": part.dist.n,
        "interface_unknowns": int(len(part.dist.interface)),
        "cg_seconds": t_cg,
        "communication_seconds": comm.seconds - comm_before,
        "matvec_ms": t_a * 1e3,
        "rmatvec_ms": t_at * 1e3,
    }
    ranks = comm.gather(mine)
    if comm.rank != 0:
        return
    its = (
        info.iterations + 4
    )  # A^T A products of the call: one per iteration, one more at the last check, 2 outside the loop
    row = {
        "ranks": comm.size,
        "communicator": comm.name,
        "device": backend.describe(),
        "grid": [args.nx, args.ny, args.nz],
        "elements": mesh.n_elements,
        "unknowns": mesh.n_dofs,
        "re": args.re,
        "iterations": info.iterations,
        "cg_ms_per_iteration": max(r["cg_seconds"] for r in ranks) / its * 1e3,
        "communication_ms_per_iteration": [r["communication_seconds"] / its * 1e3 for r in ranks],
        "matvec_ms": max(r["matvec_ms"] for r in ranks),
        "rmatvec_ms": max(r["rmatvec_ms"] for r in ranks),
        "setup_s": t_setup,
        "assemble_s": t_assemble,
        "preconditioner_s": t_diag,
        "per_rank": ranks,
    }
    with open(args.json, "w") as fh:
        json.dump(row, fh, indent=1)


def run(args, ranks: int, grid, label: str) -> dict:
    """One run on ``ranks`` ranks (no launcher for one); rank 0's results."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--nx",
            str(grid[0]),
            "--ny",
            str(grid[1]),
            "--nz",
            str(grid[2]),
            "--re",
            str(args.re),
            "--iterations",
            str(args.iterations),
            "--device",
            args.device,
            "--comm",
            args.comm,
            "--json",
            out,
        ]
        if ranks > 1:
            cmd = shlex.split(args.launcher) + ["-n", str(ranks)] + cmd
        print(f"{label}: {' '.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(out):
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return {"ranks": ranks, "grid": list(grid), "error": proc.stderr[-500:]}
        with open(out) as fh:
            row = json.load(fh)
    row["study"] = label
    print(
        f"  {row['ranks']} ranks {row['grid']}: {row['cg_ms_per_iteration']:.3f} ms/iteration, "
        f"A {row['matvec_ms']:.3f} ms, "
        f"A^T {row['rmatvec_ms']:.3f} ms, communication {max(row['communication_ms_per_iteration']):.3f} ms/iteration",
        flush=True,
    )
    return row


def markdown(meta, rows) -> str:
    lines = [
        f"# Scaling of the distributed CG ({meta['device']})",
        "",
        f"`{meta['command']}`",
        "",
        "CG time per iteration (A x and A^T y with interface sums, one fused reduction; slowest rank), "
        f"Re {meta['re']}, {meta['iterations']} iterations timed. {PAPER_STRONG}.",
        "",
        "| study | ranks | grid | unknowns | ms / iteration | speed-up | efficiency | comm ms / it (max rank) "
        "| A ms | A^T ms |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for study in ("strong", "weak"):
        sel = [r for r in rows if r.get("study") == study and "error" not in r]
        base = next((r for r in sel if r["ranks"] == 1), None)
        for r in sel:
            t1 = base["cg_ms_per_iteration"] if base else float("nan")
            speed = t1 / r["cg_ms_per_iteration"]
            eff = speed / r["ranks"] if study == "strong" else speed
            lines.append(
                f"| {study} | {r['ranks']} | {'x'.join(map(str, r['grid']))} | {r['unknowns']:,} | "
                f"{r['cg_ms_per_iteration']:.3f} | {speed:.2f} | {eff:.0%} | "
                f"{max(r['communication_ms_per_iteration']):.3f} | "
                f"{r['matvec_ms']:.3f} | {r['rmatvec_ms']:.3f} |"
            )
            r["speed_up"], r["efficiency"] = speed, eff
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--strong", type=int, default=64, help="elements per side of the strong-scaling cube (0: skip)")
    ap.add_argument("--weak", type=int, default=40, help="elements per side per rank of the weak-scaling box (0: skip)")
    ap.add_argument("--re", type=float, default=400.0)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--comm", default="auto")
    ap.add_argument("--launcher", default=os.environ.get("MPIEXEC", "mpiexec"), help="MPI launcher (default mpiexec)")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nx", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ny", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--nz", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    rows = []
    for p in args.ranks:
        if args.strong:
            rows.append(run(args, p, (args.strong,) * 3, "strong"))
    for p in args.ranks:
        if args.weak:
            rows.append(run(args, p, (args.weak, args.weak, args.weak * p), "weak"))
    ok = [r for r in rows if "error" not in r]
    meta = {
        "device": ok[0]["device"] if ok else "?",
        "command": "python " + " ".join(sys.argv),
        "re": args.re,
        "iterations": args.iterations,
    }
    table = markdown(meta, rows)
    print(table)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, f"scaling_{args.tag}.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    with open(os.path.join(args.results, f"scaling_{args.tag}.md"), "w") as fh:
        fh.write(table)
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
