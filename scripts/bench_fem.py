"""Performance of fem3d: phase timings, bandwidth of the EBE products, and the unit time
of Kao & Sheu (2018), Tables 3 and 4, for the lid-driven cube.

    python scripts/bench_fem.py --device gpu --sizes 20 40 50 64 75 --re 400 1000 --cpu-max 40 --tag h100

Two parts. Each row is added to benchmarks/results/fem_<tag>.json as soon as it is
measured (a later call with the same tag adds rows or replaces those with the same
key), and fem_<tag>.md is rewritten from all rows, so calls can be split.

phases  (--parts phases) for each N and element-matrix storage (--matrix-dtypes), on
        this process's device: mesh, solver set-up, element matrices, preconditioner,
        one A and one A^T product with the bytes they must move (fem3d.kernels.ebe.
        bytes_moved) and the fraction of the device copy bandwidth measured in the
        same run, the fused CG vector kernels, one CG iteration (difference of two
        runs of different lengths), and device memory per element. --cpu-max N adds
        the same on the NumPy path for N <= that, for the speed-up over our own CPU code.
        Beside the stored matrices, the sum-factorised operator (fem3d.solvers.
        partial_assembly: the CUDA kernel, or its NumPy reference on the CPU): one A and
        one A^T product of each, Picard matrix and Newton Jacobian about the same iterate,
        in ms and M unknowns per second, bytes stored per element, and the relative
        difference of the products (the run stops if above 1e-10 with float64 storage).
solves  (--parts solves) ``python -m fem3d.cavity`` for each N and Re with the
        validation's settings (grading 1, tolerances as the cavity's defaults,
        continuation from Re 400): T_run (data preparation, element matrices,
        preconditioner, solves) and T_unit = T_run 1e6 / (N_picard N_elem) us. For N
        above --solve-max only --picard-steps steps per Reynolds stage are run, and the
        row is marked partial. With --ranks P > 1 the cavity runs under --launcher.
        Solves longer than one call allows run in segments (--segment-steps).

The CPU T_unit is estimated: the GPU solve's Picard steps and CG iterations times the
CPU's measured time per element-matrix pass, preconditioner and CG iteration.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import os
import shlex
import sys
import tempfile
import time

import numpy as np

from bench_tridiag import copy_bandwidth
from cli_case import run_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Kao & Sheu 2018, Tables 3 (Re 400) and 4 (Re 1000): T_unit in us of 1 CPU (14 cores), 1, 2 and 4 P100 GPUs.
PAPER = {
    400.0: {
        40: (124627.0, 2206.0, 1877.7, 1662.7),
        50: (154976.9, 2424.7, 2030.0, 1790.2),
        64: (178111.8, None, 2339.9, 2093.0),
        75: (259914.0, None, None, 2256.9),
    },
    1000.0: {
        40: (265879.9, 3924.4, 3215.1, 2956.2),
        50: (389859.5, 4581.8, 3727.7, 3421.7),
        64: (526862.8, None, 4500.1, 4158.7),
        75: (636523.9, None, None, 4734.0),
    },
}
CG_LENGTHS = {"gpu": (10, 60), "cpu": (2, 5)}  # CG runs whose time difference gives one iteration
PA_TOLERANCE = {"float64": 1e-10, "float32": 1e-6}  # largest relative difference of sum-factorised (by the point
# data's type: float32 rounds them) and stored float64 products


def phase_row(backend, n: int, matrix_dtype: str, grading: float, copy_gbs, padded: bool) -> dict:
    """Timings of every phase for an n^3 cavity at Re 400 about the initial guess."""
    from fem3d.kernels import cg, ebe
    from fem3d.solvers.krylov import NormalEquationsCG, NormalJacobi
    from fem3d.discretisation.mesh import box_mesh
    from fem3d.problems.navier_stokes import NavierStokesSystem
    from fem3d.problems.lid_driven import lid_driven_problem

    xp, gpu = backend.xp, backend.is_gpu
    pool = xp.get_default_memory_pool() if gpu else None
    gc.collect()  # the previous size's arrays
    if gpu:
        pool.free_all_blocks()
    t0 = time.perf_counter()
    mesh = box_mesh(n, grading=grading)
    problem = lid_driven_problem(mesh, 400.0, "y=1")
    t_mesh = time.perf_counter() - t0
    t0 = time.perf_counter()
    system = NavierStokesSystem(problem, backend, matrix_dtype=matrix_dtype)
    backend.synchronize()
    t_setup = time.perf_counter() - t0
    op, x = system.op, system.initial_guess()
    repeat = 3 if gpu else 1
    t_elem = backend.time_call(lambda: system.assemble(x, "picard"), repeat=repeat, warmup=1 if gpu else 0)
    b = system.assemble(x, "picard").residual
    jacobi = NormalJacobi()
    t_prec = backend.time_call(lambda: jacobi.setup(op), repeat=repeat, warmup=0)
    y = xp.empty_like(x)
    t_a = backend.time_call(lambda: op.matvec(x, y), repeat=10 if gpu else 2, warmup=2 if gpu else 1)
    t_at = backend.time_call(lambda: op.rmatvec(x, y), repeat=10 if gpu else 2, warmup=2 if gpu else 1)

    def cg_run(its):
        return lambda: NormalEquationsCG(1e-300, its, 10).solve(op, b, xp.zeros_like(x), jacobi)

    short, long = CG_LENGTHS[backend.kind]
    r = 3 if gpu else 1
    t_cg = (
        backend.time_call(cg_run(long), repeat=r, warmup=1 if gpu else 0)
        - backend.time_call(cg_run(short), repeat=r, warmup=0)
    ) / (long - short)
    dots, update = cg.for_backend(backend)
    vecs = [xp.full(x.size, 0.5 + k) for k in range(7)]
    sc = cg.new_scalars(xp)
    t_vec = backend.time_call(
        lambda: (
            dots(vecs[0], vecs[1], vecs[2], system.dist.weights, sc, None),
            update(vecs[3], vecs[0], vecs[1], vecs[4], vecs[5], vecs[2], vecs[6], sc),
        ),
        repeat=20 if gpu else 2,
        warmup=2 if gpu else 1,
    )
    itemsize = np.dtype(ebe.MATRIX_DTYPES[matrix_dtype]).itemsize
    nbytes = ebe.bytes_moved(mesh.n_elements, mesh.n_dofs, itemsize)
    row = {
        "n": n,
        "matrix_dtype": matrix_dtype,
        "device": backend.describe(),
        "kind": backend.kind,
        "elements": mesh.n_elements,
        "unknowns": mesh.n_dofs,
        "colours": mesh.n_colours,
        "mesh_s": t_mesh,
        "setup_s": t_setup,
        "element_matrices_s": t_elem,
        "preconditioner_s": t_prec,
        "a_ms": t_a * 1e3,
        "at_ms": t_at * 1e3,
        "product_bytes": nbytes,
        "a_gbs": nbytes / t_a / 1e9,
        "at_gbs": nbytes / t_at / 1e9,
        "vector_ms": t_vec * 1e3,
        "vector_bytes": 16 * 8 * x.size,
        "cg_iteration_ms": t_cg * 1e3,
    }
    if copy_gbs:
        row.update(
            copy_gbs=copy_gbs,
            a_fraction=row["a_gbs"] / copy_gbs,
            at_fraction=row["at_gbs"] / copy_gbs,
            vector_fraction=row["vector_bytes"] / t_vec / 1e9 / copy_gbs,
        )
    if gpu:
        backend.synchronize()
        row["device_bytes_live"] = int(pool.used_bytes())
        row["device_bytes_pool"] = int(pool.total_bytes())
        row["bytes_per_element"] = row["device_bytes_pool"] / mesh.n_elements
        row["device_memory_total"] = int(xp.cuda.Device().mem_info[1])
    if padded and gpu:
        row.update(padded_product(backend, op, x, nbytes, copy_gbs))
    row.update(stored_and_sum_factorised(backend, system, x))
    return row


def stored_and_sum_factorised(backend, system, x) -> dict:
    """One A and one A^T product of the stored matrices (the system's storage) and of the
    sum-factorised operator (fem3d.solvers.partial_assembly, the solver's float32 point data), Picard
    and Newton, both about the same iterate (``x`` plus seeded noise 0.1 N(0, 1) at the
    free unknowns, so that every term is active), rows weighted as the solver's: ms, M
    unknowns per second, bytes per element and the relative difference of the products
    (exits if above PA_TOLERANCE with float64 storage). Overwrites the stored matrices."""
    from fem3d.discretisation.assembly import scale_rows
    from fem3d.kernels.ebe import NL

    xp, gpu, n = backend.xp, backend.is_gpu, system.n
    rng = np.random.default_rng(0)
    iterate = x + 0.1 * xp.where(system.fixed, 0.0, backend.asarray(rng.standard_normal(n)))
    v = backend.asarray(rng.standard_normal(n))
    stored, out = system.op, {}
    for kind in ("picard", "newton"):
        state = system.assemble(iterate, kind)
        scale_rows(stored.mats, stored.dofs, None, state.scale)
        pa = system.partial_assembly(iterate, kind, state.scale)
        row, products = {"pa_bytes_per_element": pa.bytes_per_element}, {}
        for name, op in (("stored", stored), ("pa", pa)):
            for product, f in (("a", op.matvec), ("at", op.rmatvec)):
                y = products[name, product] = xp.empty(n)
                t = backend.time_call(lambda: f(v, y), repeat=10 if gpu else 2, warmup=2 if gpu else 1)
                row[f"{name}_{product}_ms"] = t * 1e3
                row[f"{name}_{product}_munknowns_s"] = n / t / 1e6
        row["rel_diff"] = max(
            float(xp.linalg.norm(products["pa", p] - products["stored", p]) / xp.linalg.norm(products["stored", p]))
            for p in ("a", "at")
        )
        out[kind] = row
        pa_points = pa.points.rounded.dtype.name
        del pa
    itemsize = stored.mats.dtype.itemsize
    rel = max(r["rel_diff"] for r in out.values())
    if itemsize == 8 and rel > PA_TOLERANCE[pa_points]:
        raise SystemExit(f"sum-factorised and stored products differ by {rel:.2e} (relative) at {n} unknowns")
    return {"operators": out, "stored_bytes_per_element": NL * NL * itemsize, "pa_rel_diff": rel}


def padded_product(backend, op, x, nbytes, copy_gbs) -> dict:
    """A and A^T with the element matrices padded to 96 columns (the layout before the
    unpadded one): same products, 8 % more bytes read."""
    from fem3d.kernels import ebe

    xp = backend.xp
    mats = xp.zeros(op.mats.shape[:2] + (96,), dtype=op.mats.dtype)
    mats[:, :, : ebe.NL] = op.mats
    y = xp.empty_like(x)
    out = {}
    for key, transpose in (("padded_a_ms", False), ("padded_at_ms", True)):
        t = backend.time_call(lambda: ebe.apply_cuda(mats, op.dofs, x, y, op.colours, transpose), repeat=10, warmup=2)
        out[key] = t * 1e3
        out[key.replace("_ms", "_fraction")] = nbytes / t / 1e9 / copy_gbs
    return out


def solve_row(args, n: int, re: float, ranks: int, matrix_dtype: str, out_dir: str, previous: dict | None) -> dict:
    """One cavity run as the command line does it; T_unit from its summary.

    With --segment-steps K a full solve runs K nonlinear steps per call; when ``previous``
    (this row from an earlier call) stopped at that limit and its solution.npy is still
    there, this call continues from it (--initial) and the row sums the segments (their
    T_run, phases and process wall times)."""
    from fem3d.solvers.nonlinear import continuation_steps

    partial = n > args.solve_max
    extra = ["--max-steps", str(args.picard_steps)] if partial else []
    segmented = bool(args.segment_steps) and not partial
    if segmented:
        if continuation_steps("auto", re):
            raise SystemExit(
                f"--segment-steps: Re {re:g} is solved in several Reynolds stages; segments need Re <= 400"
            )
        extra = ["--max-steps", str(args.segment_steps)]
    segments = []
    if segmented and previous and previous.get("resumable") and os.path.exists(previous["solution"]):
        segments = previous["segments"]
        extra += ["--initial", previous["solution"], "--continuation", "none"]
    cmd_args = [
        "--re",
        f"{re:g}",
        "--n",
        str(n),
        "--grading",
        f"{args.grading:g}",
        "--device",
        args.device,
        "--matrix-dtype",
        matrix_dtype,
        "--solver",
        "paper",
        "--quiet",
        "--no-plots",
        "--no-vtu",
        *extra,
    ]
    run_dir = os.path.abspath(os.path.join(out_dir, f"re{re:g}_n{n}_p{ranks}_{matrix_dtype}_{len(segments)}"))
    launcher = shlex.split(args.launcher) + ["-n", str(ranks)] if ranks > 1 else []
    summary, seconds = run_case("fem3d.cavity", cmd_args, run_dir, launcher)
    steps = [s["seconds"] for stage in summary["continuation"] for s in stage["steps"]]
    segments = segments + [
        {
            "picard_steps": summary["nonlinear_steps"],
            "cg_iterations": summary["linear_iterations"],
            "t_run_s": summary["t_run_s"],
            "times_s": summary["times_s"],
            "wall_s": seconds,
            "step_seconds": steps,
            "reason": summary["reason"],
        }
    ]
    picard = sum(g["picard_steps"] for g in segments)
    t_run = sum(g["t_run_s"] for g in segments)
    walls = [g.get("wall_s") for g in segments]  # None for a segment recorded without its wall time
    phases = [g.get("times_s") for g in segments]
    return {
        "n": n,
        "re": re,
        "ranks": ranks,
        "matrix_dtype": matrix_dtype,
        "partial": partial,
        "device": summary["device"],
        "elements": summary["mesh"]["elements"],
        "unknowns": summary["dofs"],
        "converged": summary["converged"],
        "reason": summary["reason"],
        "picard_steps": picard,
        "cg_iterations": sum(g["cg_iterations"] for g in segments),
        "t_run_s": t_run,
        "t_unit_us": t_run * 1e6 / (max(picard, 1) * summary["mesh"]["elements"]),
        "times_s": None if None in phases else {k: sum(t.get(k, 0.0) for t in phases) for k in phases[-1]},
        "picard_step_s": float(np.mean([t for g in segments for t in g["step_seconds"]])),
        "segments": segments,
        "resumable": segmented and summary["reason"] == "max_steps",
        "solution": os.path.join(run_dir, "solution.npy"),
        "validation": summary["validation"],
        "wall_s": None if None in walls else sum(walls),
        "command": " ".join([*launcher, summary["command"]]),
    }


def cpu_t_unit(cpu: dict, solve: dict) -> float:
    """CPU T_unit (us) estimated for the solve's Picard steps and CG iterations."""
    steps = solve["picard_steps"]
    t = cpu["mesh_s"] + cpu["setup_s"] + steps * (cpu["element_matrices_s"] + cpu["preconditioner_s"])
    t += (solve["cg_iterations"] + 4 * steps) * cpu["cg_iteration_ms"] * 1e-3
    return t * 1e6 / (steps * solve["elements"])


def fmt(v, spec=".1f", none="–", suffix=""):
    return none if v is None else format(v, spec) + suffix


def rate(v) -> str:
    """M unknowns per second: whole numbers, two digits below 10 (the CPU at toy sizes)."""
    return f"{v:,.0f}" if v >= 10 else f"{v:.2g}"


def markdown(data: dict) -> str:
    meta, phases, solves = data["meta"], data["phases"], data["solves"]
    lines = [f"# fem3d performance ({meta.get('device', '?')})", "", *[f"`{c}`" for c in meta.get("commands", [])], ""]
    if phases:
        lines += [
            f"Device copy bandwidth (read + write of a 1 GiB array, measured in the phases run): "
            f"{fmt(meta.get('copy_gbs'), '.0f')} GB/s; fractions below are of that.",
            "",
            "## Products and CG iteration (lid-driven cube, Re 400, system about the initial guess)",
            "",
            "Bytes a product must move: every stored matrix entry and unknown index once, x read and y written once "
            "(fem3d.kernels.ebe.bytes_moved). CG iteration: one A and one A^T product, the fused reduction and update, "
            "a residual check every 10 iterations.",
            "",
            "| N | storage | device | unknowns | A ms | A GB/s (% copy) | A^T ms | A^T GB/s (% copy) "
            "| vectors ms (% copy) | CG iteration ms | bytes / element |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in sorted(phases.values(), key=lambda r: (r["kind"] != "gpu", r["n"], r["matrix_dtype"])):

            def pct(k):
                return f" ({p[k]:.0%})" if k in p else ""

            lines.append(
                f"| {p['n']} | {p['matrix_dtype']} | {p['kind']} | {p['unknowns']:,} | {p['a_ms']:.3f} | "
                f"{p['a_gbs']:.0f}{pct('a_fraction')} | {p['at_ms']:.3f} | {p['at_gbs']:.0f}{pct('at_fraction')} | "
                f"{p['vector_ms']:.3f}{pct('vector_fraction')} | {p['cg_iteration_ms']:.3f} | "
                f"{fmt(p.get('bytes_per_element'), ',.0f')} |"
            )
        padded = [p for p in phases.values() if "padded_a_ms" in p]
        if padded:
            lines += [
                "",
                "Rows padded to 96 columns (the earlier layout), same products: "
                + "; ".join(
                    f"N {p['n']} {p['matrix_dtype']}: A {p['padded_a_ms']:.3f} ms ({p['padded_a_fraction']:.0%}), "
                    f"A^T {p['padded_at_ms']:.3f} ms ({p['padded_at_fraction']:.0%})"
                    for p in padded
                )
                + ".",
            ]
        lines += [
            "",
            "## Sum-factorised operator against the stored matrices",
            "",
            "One product of the stored element matrices (the row's storage) and of the sum-factorised operator "
            "(fem3d.solvers.partial_assembly), both about the initial guess plus seeded noise at the free unknowns, "
            "rows weighted as the solver's; M unknowns/s = unknowns / seconds / 1e6. Bytes per element: the stored "
            "matrix (89 x 89 entries) against the point data and unknown indices; difference: largest "
            "||PA x - A x|| / ||A x|| of the two products.",
            "",
            "| N | storage | device | unknowns | operator | stored A ms | stored A^T ms | PA A ms | PA A^T ms "
            "| stored A / A^T M unknowns/s | PA A / A^T M unknowns/s | bytes / element stored / PA | difference |",
            "|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in sorted(phases.values(), key=lambda r: (r["kind"] != "gpu", r["n"], r["matrix_dtype"])):
            head = f"| {p['n']} | {p['matrix_dtype']} | {p['kind']} | {p['unknowns']:,} |"
            if "operators" not in p:  # recorded before these were measured
                lines.append(head + " – |" + " |" * 8)
            for kind, o in p.get("operators", {}).items():
                lines.append(
                    f"{head} {kind} | {o['stored_a_ms']:.3f} | {o['stored_at_ms']:.3f} | {o['pa_a_ms']:.3f} | "
                    f"{o['pa_at_ms']:.3f} | {rate(o['stored_a_munknowns_s'])} / {rate(o['stored_at_munknowns_s'])} | "
                    f"{rate(o['pa_a_munknowns_s'])} / {rate(o['pa_at_munknowns_s'])} | "
                    f"{p['stored_bytes_per_element']:,} / {o['pa_bytes_per_element']:,} | {o['rel_diff']:.1e} |"
                )
        lines += [
            "",
            "## Phases (seconds)",
            "",
            "| N | storage | device | mesh | set-up | element matrices | preconditioner | CG iteration (ms) "
            "| CPU/GPU: element matrices | preconditioner | CG iteration |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in sorted(phases.values(), key=lambda r: (r["kind"] != "gpu", r["n"], r["matrix_dtype"])):
            cpu = phases.get(f"cpu/{p['n']}/float64") if p["kind"] == "gpu" else None

            def ratio(k):
                return f"{cpu[k] / p[k]:.0f}x" if cpu else "–"

            lines.append(
                f"| {p['n']} | {p['matrix_dtype']} | {p['kind']} | {p['mesh_s']:.2f} | {p['setup_s']:.2f} | "
                f"{p['element_matrices_s']:.3f} | {p['preconditioner_s']:.3f} | {p['cg_iteration_ms']:.3f} | "
                f"{ratio('element_matrices_s')} | {ratio('preconditioner_s')} | {ratio('cg_iteration_ms')} |"
            )
        gpu_rows = [p for p in phases.values() if p["kind"] == "gpu" and "device_memory_total" in p]
        if gpu_rows:
            lines += ["", "## Memory", ""]
            for dtype in sorted({p["matrix_dtype"] for p in gpu_rows}):
                big = max((p for p in gpu_rows if p["matrix_dtype"] == dtype), key=lambda r: r["n"])
                n_max = int((0.95 * big["device_memory_total"] / big["bytes_per_element"]) ** (1 / 3))
                lines.append(
                    f"- {dtype} storage: {big['bytes_per_element']:,.0f} bytes per element at N = {big['n']} "
                    f"(peak device memory held, {big['device_bytes_pool'] / 2**30:.1f} GiB); the largest N^3 cube that "
                    f"fits in 95 % of the {big['device_memory_total'] / 2**30:.0f} GiB is about N = {n_max}."
                )
    for re, table in ((400.0, 3), (1000.0, 4)):
        rows = [s for s in solves.values() if s["re"] == re]
        if not rows:
            continue
        lines += [
            "",
            f"## Table {table} layout: Re {re:g}, T_unit (us)",
            "",
            "| N_elem | N_DOF | storage | ours 1-CPU (NumPy, est.) | ours 1-GPU | ours 2-GPU | paper 1-CPU (A) "
            "| paper 1-GPU (B) | paper 2-GPU (C) | paper 4-GPU (D) | ours CPU / GPU | paper (B) / ours | Picard steps "
            "| CG its | Picard step s | solve |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for n in sorted({s["n"] for s in rows}):
            for dtype in sorted({s["matrix_dtype"] for s in rows if s["n"] == n}):
                by_ranks = {s["ranks"]: s for s in rows if s["n"] == n and s["matrix_dtype"] == dtype}
                one = by_ranks.get(1) or next(iter(by_ranks.values()))
                paper = PAPER[re].get(n, (None,) * 4)
                cpu = phases.get(f"cpu/{n}/float64")
                cpu_us = cpu_t_unit(cpu, one) if cpu and 1 in by_ranks and one["device"].startswith("gpu") else None
                g1 = by_ranks[1]["t_unit_us"] if 1 in by_ranks else None
                g2 = by_ranks[2]["t_unit_us"] if 2 in by_ranks else None
                status = ("converged" if one["converged"] else one["reason"]) + (" (partial)" if one["partial"] else "")
                if len(one.get("segments", [])) > 1:
                    status += f" ({len(one['segments'])} segments)"
                lines.append(
                    f"| {n}^3 | {one['unknowns']:,} | {dtype} | {fmt(cpu_us)} | {fmt(g1)} | {fmt(g2)} | "
                    + " | ".join(fmt(v) for v in paper)
                    + f" | {fmt(cpu_us / g1 if cpu_us and g1 else None, '.0f', suffix='x')} | "
                    f"{fmt(paper[1] / g1 if paper[1] and g1 else None, '.0f', suffix='x')} | {one['picard_steps']} | "
                    f"{one['cg_iterations']} | {one['picard_step_s']:.2f} | {status} |"
                )
    lines += [
        "",
        "Partial: only the first Picard steps of each Reynolds stage were run (--picard-steps); T_unit is then the "
        "time per Picard step of those steps. Paper: P100 GPUs and a 14-core E5-2690 v4 (OpenMP).",
    ]
    return "\n".join(lines) + "\n"


def save(path: str, mine: dict) -> dict:
    """Merge this run's rows and metadata into path.json (under a lock, so that a CPU
    and a GPU run may write the same file) and rewrite path.md; returns the merged data."""
    with open(os.path.join(tempfile.gettempdir(), os.path.basename(path) + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = {"meta": {}, "phases": {}, "solves": {}}
        if os.path.exists(path + ".json"):
            with open(path + ".json") as fh:
                data = json.load(fh)
        commands = set(data["meta"].get("commands", [])) | set(mine["meta"].get("commands", []))
        if mine["meta"].get("copy_gbs") or "device" not in data["meta"]:
            data["meta"].update(mine["meta"])
        data["meta"]["commands"] = sorted(commands)
        data["phases"].update(mine["phases"])
        data["solves"].update(mine["solves"])
        with open(path + ".json", "w") as fh:
            json.dump(data, fh, indent=1)
        with open(path + ".md", "w") as fh:
            fh.write(markdown(data))
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 40, 50, 64, 75], help="elements per side")
    ap.add_argument("--re", type=float, nargs="+", default=[400.0, 1000.0])
    ap.add_argument("--parts", nargs="+", default=["phases", "solves"], choices=["phases", "solves"])
    ap.add_argument("--matrix-dtypes", nargs="+", default=["float64", "float32"])
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--cpu-max", type=int, default=0, help="also time the NumPy path for N up to this (0: never)")
    ap.add_argument("--padded", type=int, nargs="*", default=[40], help="sizes at which the padded layout is timed too")
    ap.add_argument("--solve-max", type=int, default=40, help="full solves up to this N; partial runs above")
    ap.add_argument("--picard-steps", type=int, default=2, help="Picard steps per Reynolds stage of a partial run")
    ap.add_argument(
        "--segment-steps",
        type=int,
        default=0,
        help="run full solves (Re <= 400) in segments of this many Picard steps, one per call: a later call "
        "with the same --tag and --runs continues an unconverged row from its solution.npy",
    )
    ap.add_argument("--grading", type=float, default=1.0)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1])
    ap.add_argument("--launcher", default=os.environ.get("MPIEXEC", "mpiexec"))
    ap.add_argument("--runs", default="bench-fem-runs", help="folder for the cavity runs' outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu")
    args = ap.parse_args(argv)
    from gpucfd.backend import get_backend

    backend = get_backend(args.device)
    os.makedirs(args.results, exist_ok=True)
    path = os.path.join(args.results, f"fem_{args.tag}")
    data = {"meta": {"commands": ["python scripts/bench_fem.py " + " ".join(sys.argv[1:])]}, "phases": {}, "solves": {}}
    meta = data["meta"]
    meta["device"] = backend.describe()
    if backend.is_gpu and "phases" in args.parts:
        meta["copy_gbs"] = copy_bandwidth(backend, 1 << 30)
        print(f"copy bandwidth {meta['copy_gbs']:.0f} GB/s", flush=True)
    if "phases" in args.parts:
        cpu = get_backend("cpu")
        for n in args.sizes:
            runs = [(backend, d) for d in args.matrix_dtypes] + (
                [(cpu, "float64")] if backend.is_gpu and n <= args.cpu_max else []
            )
            for be, dtype in runs:
                row = phase_row(
                    be,
                    n,
                    dtype,
                    args.grading,
                    meta.get("copy_gbs") if be.is_gpu else None,
                    be.is_gpu and n in args.padded,
                )
                data["phases"][f"{be.kind}/{n}/{dtype}"] = row
                save(path, data)
                print(
                    f"N {n} {dtype} {be.kind}: A {row['a_ms']:.3f} ms ({row['a_gbs']:.0f} GB/s), "
                    f"A^T {row['at_ms']:.3f} ms "
                    f"({row['at_gbs']:.0f} GB/s), CG iteration {row['cg_iteration_ms']:.3f} ms, element matrices "
                    f"{row['element_matrices_s']:.3f} s, preconditioner {row['preconditioner_s']:.3f} s; M unknowns/s "
                    + ", ".join(
                        f"{k} A stored {o['stored_a_munknowns_s']:,.0f}, PA {o['pa_a_munknowns_s']:,.0f}"
                        for k, o in row["operators"].items()
                    )
                    + f" (PA - stored: {row['pa_rel_diff']:.1e})",
                    flush=True,
                )
    if "solves" in args.parts:
        previous = {}
        if os.path.exists(path + ".json"):
            with open(path + ".json") as fh:
                previous = json.load(fh)["solves"]
        for ranks in args.ranks:
            for n in args.sizes:
                for re in args.re:
                    for dtype in args.matrix_dtypes:
                        key = f"{ranks}/{n}/{re:g}/{dtype}"
                        row = solve_row(args, n, re, ranks, dtype, args.runs, previous.get(key))
                        data["solves"][key] = row
                        save(path, data)
                        print(
                            f"N {n} Re {re:g} {dtype} on {ranks}: T_unit {row['t_unit_us']:.1f} us, "
                            f"{row['picard_steps']} Picard "
                            f"steps, {row['cg_iterations']} CG its, {row['t_run_s']:.1f} s ({row['reason']})",
                            flush=True,
                        )
    print(markdown(save(path, data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
