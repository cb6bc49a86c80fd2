"""Where one V-cycle of the mg solver spends its time, level by level, on one GPU or on each
rank of an MPI run (one rank per GPU).

    python scripts/profile_multigrid.py --device gpu --n 40
    python scripts/profile_multigrid.py --device cpu --n 8 --re 400
    mpirun -n 4 python scripts/profile_multigrid.py --device gpu --n 80
    CUDA_VISIBLE_DEVICES=0 mpirun -n 2 python scripts/profile_multigrid.py --device gpu --n 80 --allow-shared-gpu

Builds the lid-driven cube of N^3 graded elements, assembles the Newton Jacobian about
the state after ``--picard`` Picard steps from rest (the timings hardly depend on it)
and the mg solver's multigrid hierarchy, then times (best of ``--repeats``, device synchronised)
on every level: the element-by-element product, one smoother application and one
smoothing (fem3d.solvers.multigrid.SMOOTHING_STEPS GMRES steps), and for the whole cycle: the
Galerkin products, the Vanka set-ups, the coarse inverse, one V-cycle and one product
with the float64 system matrix. A level whose smoothing takes much longer than its
products is bound by the host's launch overhead, not by the device. Under MPI the mesh is
cut as fem3d.cavity cuts it; every rank times the same calls (its interface sums
included), the most of any rank is kept, and each level records its elements on the
busiest rank, whether it is partitioned, and the interface sums, entries sent and
reductions of one smoothing (the inputs of scripts/level_model.py), and the record the number
of GPUs its ranks ran on (fewer than the ranks with --allow-shared-gpu). Saves
benchmarks/results/profile_multigrid_<tag>.{json,md}.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import numpy as np

from gpucfd.errors import ArgumentParser, InputError, check_range, run_cli
from gpucfd.output import write_record
from script_options import check_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_ms(backend, f, repeats: int) -> float:
    """Least wall time of ``f()`` over ``repeats`` calls after one untimed call, in ms."""
    f()
    backend.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        backend.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def profile(n: int, re: float, device: str, picard: int, repeats: int, allow_shared_gpu: bool = False) -> dict:
    from fem3d.solvers.krylov import gmres_steps
    from fem3d.problems.memory import check_fits
    from fem3d.discretisation.mesh import box_mesh
    from fem3d.parallel.comm import setup
    from fem3d.parallel.partition import distribute
    from fem3d.problems.distributed import partitioned_system
    from fem3d.solvers.multigrid import SMOOTHING_STEPS, coarse_levels
    from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
    from fem3d.problems.lid_driven import lid_driven_problem
    from fem3d.solvers.linear import LinearOptions, make_linear_solver

    backend, comm = setup(device, allow_shared_gpu=allow_shared_gpu)
    xp = backend.xp
    check_fits(backend, "float64", "mg", n**3, comm.size, lambda e: f"--n {2 * int(e ** (1 / 3) / 2)} fits at most")
    mesh = box_mesh(n, grading=1.0)
    levels = coarse_levels(mesh)
    if levels == 0:
        raise InputError(f"--n {n} has no coarser level: take at least 6")
    options = LinearOptions(solver="mg").for_mesh(mesh)
    part = distribute(mesh, comm, backend, options.alignment(mesh, comm.size))
    system = partitioned_system(lid_driven_problem(mesh, re, "y=1"), part, backend)
    linear = make_linear_solver(options)
    x = system.initial_guess()
    if picard:
        x = backend.asarray(NonlinearSolver(system, linear, NonlinearOptions(newton=0.0, max_steps=picard)).solve().x)
    linear.setup(system, system.assemble(x, "newton"))
    if not linear.ready:
        raise RuntimeError("a Vanka block is singular")
    mg = linear.mg
    rng = np.random.default_rng(0)
    rows = []
    for k, level in enumerate(mg.levels[:-1] if mg.direct is not None else mg.levels):
        v = backend.asarray(rng.standard_normal(level.op.n))
        w = xp.empty_like(v)
        dist = level.op.dist
        before = (dist.sums, dist.values_sent, comm.traffic["reductions"])
        gmres_steps(level.op, v, None, level.smoother, SMOOTHING_STEPS)
        sums, sent, reductions = (
            a - b for a, b in zip((dist.sums, dist.values_sent, comm.traffic["reductions"]), before)
        )
        rows.append(
            {
                "level": k,
                "elements": int(level.op.dofs.shape[0]),
                "unknowns": level.op.n,
                "partitioned": not dist.is_serial,
                "sums_per_smoothing": sums,
                "values_per_smoothing": sent,
                "reductions_per_smoothing": reductions,
                "product_ms": best_ms(backend, lambda: level.op.matvec(v, w), repeats),
                "smoother_ms": best_ms(backend, lambda: level.smoother.apply(v, w), repeats),
                "smoothing_ms": best_ms(
                    backend, lambda: gmres_steps(level.op, v, None, level.smoother, SMOOTHING_STEPS), repeats
                ),
                "vanka_setup_ms": best_ms(backend, level.smoother.setup, repeats),
            }
        )
    r = backend.asarray(rng.standard_normal(system.n))
    out = xp.empty_like(r)
    cycle = {
        "galerkin_ms": best_ms(backend, lambda: [f.galerkin(c) for f, c in zip(mg.levels, mg.levels[1:])], repeats),
        "coarse_inverse_ms": best_ms(backend, lambda: (mg.direct.setup(), mg.direct.wait()), repeats)
        if mg.direct is not None
        else None,
        "setup_ms": best_ms(backend, mg.setup, repeats),
        "v_cycle_ms": best_ms(backend, lambda: mg.apply(r, out), repeats),
        "system_product_ms": best_ms(backend, lambda: system.op.matvec(r, out), repeats),
    }
    devices = comm.allgather((socket.gethostname(), backend.device_id))
    everyone = comm.gather((rows, cycle))
    if everyone is None:
        return None
    busiest = lambda values: max(values, key=lambda x: -1 if x is None else x)  # noqa: E731 - the most of any rank
    for k, row in enumerate(rows):
        for key in row:
            if key not in ("level", "partitioned"):
                row[key] = busiest([theirs[k][key] for theirs, _ in everyone])
    cycle = {key: busiest([c[key] for _, c in everyone]) for key in cycle}
    return {
        "n": n,
        "re": re,
        "device": backend.describe(),
        "ranks": comm.size,
        "communicator": comm.name,
        "gpus": len(set(devices)) if backend.is_gpu else None,
        "smoothing_steps": SMOOTHING_STEPS,
        "levels": rows,
        "cycle": cycle,
    }


def table(result: dict) -> str:
    s = result["smoothing_steps"]
    lines = [
        f"| level | elements | unknowns | product ms | smoother ms | smoothing ({s} GMRES steps) ms "
        "| of which not products | "
        "Vanka set-up ms | interface sums, entries sent per smoothing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["levels"]:
        work = s * (r["product_ms"] + r["smoother_ms"])
        sent = (
            f"{r['sums_per_smoothing']}, {r['values_per_smoothing']:,}"
            if r["partitioned"]
            else ("whole on every rank" if result["ranks"] > 1 else "-")
        )
        lines.append(
            f"| {r['level']} | {r['elements']:,} | {r['unknowns']:,} | {r['product_ms']:.3f} | "
            f"{r['smoother_ms']:.3f} | {r['smoothing_ms']:.2f} | {max(0.0, 1 - work / r['smoothing_ms']):.0%} | "
            f"{r['vanka_setup_ms']:.2f} | {sent} |"
        )
    c = result["cycle"]
    coarse = "" if c["coarse_inverse_ms"] is None else f", coarse inverse {c['coarse_inverse_ms']:.2f} ms"
    lines += [
        "",
        f"V-cycle {c['v_cycle_ms']:.2f} ms; product with the float64 system matrix {c['system_product_ms']:.3f} ms; "
        f"set-up {c['setup_ms']:.2f} ms (Galerkin products {c['galerkin_ms']:.2f} ms{coarse}).",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="scripts/profile_multigrid.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="elements per side, even (default 40)")
    ap.add_argument("--re", type=float, default=1000.0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--picard", type=int, default=1, help="Picard steps from rest before the Jacobian (default 1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--allow-shared-gpu",
        action="store_true",
        help="let several ranks share a GPU (they take turns on it; the record's gpus counts the devices used)",
    )
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default=None, help="suffix of the result files (default: device and N)")
    args = ap.parse_args(argv)
    check_range("--n", args.n, 4, 200, integer=True)
    check_range("--re", args.re, 0, 1e5, low_open=True)
    check_range("--picard", args.picard, 0, 50, integer=True)
    check_range("--repeats", args.repeats, 1, 1000, integer=True)
    tag = check_tag(args.tag) if args.tag else None
    result = profile(args.n, args.re, args.device, args.picard, args.repeats, args.allow_shared_gpu)
    if result is None:  # not rank 0
        return 0
    ranks = result["ranks"]
    launched = f"mpirun -n {ranks} " if ranks > 1 else ""
    result["command"] = f"{launched}python scripts/profile_multigrid.py " + " ".join(argv)
    text = table(result)
    print(text)
    tag = tag or f"{'gpu' if 'gpu' in result['device'] else 'cpu'}_n{args.n}" + (f"_p{ranks}" if ranks > 1 else "")
    gpus = (
        f" on {result['gpus']} GPU{'s' if result['gpus'] > 1 else ''}"
        if result["gpus"] and result["gpus"] < ranks
        else ""
    )
    where = (
        f" on {ranks} ranks{gpus} ({result['communicator']}; the most of any rank, elements of the busiest)"
        if ranks > 1
        else ""
    )
    write_record(
        os.path.join(args.results, f"profile_multigrid_{tag}"),
        result,
        f"# One V-cycle of mg, level by level ({result['device']}{where})\n\n`{result['command']}`\n\n"
        f"{args.n}³ graded lid-driven cube, Re {args.re:g}, Newton Jacobian after {args.picard} Picard "
        f"step(s); best of {args.repeats}.\n\n{text}\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/profile_multigrid.py"))
