"""The DFG 3D-1Z benchmark (flow around a cylinder, Re 20) on refinements of the committed
coarse mesh: drag, lift and pressure difference against the reference values.

    python scripts/dfg_benchmark.py --device gpu --refine 0 1 2 3
    python scripts/dfg_benchmark.py --device cpu --refine 0 1

Runs ``python -m fem3d.run meshes/dfg3d/dfg_3d_1z.toml --refine K`` for each K, each in its
own process (after one untimed Newton step of the mesh refined once, which compiles the
multigrid kernels), and tabulates elements, unknowns, Newton steps, Krylov iterations per
step, the process wall time, the device memory held at the peak (CuPy's pool) or the
process's peak resident size (CPU), c_D, c_L, delta_p and their errors against Braack &
Richter (2006). Saves
benchmarks/results/dfg3d_<tag>.{json,md}.
"""

from __future__ import annotations

import csv
import importlib.resources
import json
import os
import subprocess
import sys
import tempfile

from gpucfd.errors import ArgumentParser, run_cli
from script_options import check_each, check_tag
from timed_runs import record_memory, timed_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "meshes", "dfg3d", "dfg_3d_1z.toml")


def references() -> dict:
    """{quantity: reference value} of 3D-1Z (fem3d/reference_data)."""
    path = importlib.resources.files("fem3d").joinpath("reference_data", "dfg_cylinder_schaefer_turek1996_steady.csv")
    with path.open() as fh:
        return {row["quantity"]: float(row["reference"]) for row in csv.DictReader(fh) if row["case"] == "3D-1Z"}


def run(k: int, device: str, runs: str, ref: dict) -> dict:
    out = os.path.join(runs, f"refine{k}")
    args = [CASE, "--refine", str(k), "--device", device, "--quiet", "--no-vtu", "--no-plots", "--out", out]
    print(f"python -m fem3d.run {' '.join(os.path.relpath(a, ROOT) if a == CASE else a for a in args)}", flush=True)
    wall, s, memory = timed_child(__file__, args, out)
    q = s["quantities"]
    c_d, c_l, _ = q["forces"]["cylinder"]["coefficients"]
    values = {"c_D": c_d, "c_L": c_l, "delta_p": q["differences"]["delta_p"]}
    return {
        "refine": k,
        "elements": s["mesh"]["elements"],
        "unknowns": s["dofs"],
        "device": s["device"],
        "solver": s["options"]["linear"]["solver"],
        "converged": s["converged"],
        "newton_steps": s["nonlinear_steps"],
        "linear_iterations": s["linear_iterations"],
        "iterations_per_step": s["linear_iterations_per_step"],
        "wall_s": wall,
        "times_s": s["times_s"],
        **memory,
        **values,
        "errors": {name: (values[name] - ref[name]) / ref[name] for name in values},
    }


def table(rows: list, ref: dict) -> str:
    lines = [
        "| refine | elements | unknowns | solver | Newton steps | Krylov its/step | wall s | peak memory GB "
        f"| c_D (ref {ref['c_D']}) | error | c_L (ref {ref['c_L']}) | error | Δp (ref {ref['delta_p']}) | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = r["device_pool_bytes"] if r["device_pool_bytes"] is not None else r["max_rss_bytes"]
        e = r["errors"]
        lines.append(
            f"| {r['refine']} | {r['elements']:,} | {r['unknowns']:,} | {r['solver']} | {r['newton_steps']} "
            f"| {r['iterations_per_step']:.1f} | {r['wall_s']:.1f} | {peak / 1e9:.2f} | {r['c_D']:.5f} "
            f"| {100 * e['c_D']:+.3f} % | {r['c_L']:.6f} | {100 * e['c_L']:+.1f} % | {r['delta_p']:.5f} "
            f"| {100 * e['delta_p']:+.2f} % |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python scripts/dfg_benchmark.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto)")
    ap.add_argument(
        "--refine", type=int, nargs="+", default=[0, 1], help="refinement levels of the coarse mesh (default 0 1)"
    )
    ap.add_argument("--tag", help="results name: benchmarks/results/dfg3d_<tag>.{json,md} (default the device kind)")
    args = ap.parse_args(argv)
    levels = check_each("--refine", args.refine, low=0, high=6, integer=True)
    from gpucfd.backend import get_backend

    tag = check_tag(args.tag or get_backend(args.device).kind)
    runs = tempfile.mkdtemp(prefix=f"dfg3d_{tag}_")
    ref = references()
    print(
        f"python -m fem3d.run {os.path.relpath(CASE, ROOT)} --refine 1 --device {args.device} "
        "(untimed: kernels compile)",
        flush=True,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fem3d.run",
            CASE,
            "--refine",
            "1",
            "--device",
            args.device,
            "--quiet",
            "--no-vtu",
            "--no-plots",
            "--max-steps",
            "1",
            "--out",
            os.path.join(runs, "warmup"),
        ],
        capture_output=True,
    )
    rows = [run(k, args.device, runs, ref) for k in levels]
    text = table(rows, ref)
    print(text)
    results = os.path.join(ROOT, "benchmarks", "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, f"dfg3d_{tag}.json"), "w") as fh:
        json.dump(
            {
                "command": " ".join(["python scripts/dfg_benchmark.py", *(argv or sys.argv[1:])]),
                "references": ref,
                "rows": rows,
            },
            fh,
            indent=1,
        )
    with open(os.path.join(results, f"dfg3d_{tag}.md"), "w") as fh:
        fh.write(
            f"# DFG 3D-1Z on refinements of meshes/dfg3d/channel_coarse.msh ({rows[0]['device']})\n\n"
            f"`python scripts/dfg_benchmark.py {' '.join(argv or sys.argv[1:])}`; references: Braack & Richter (2006); "
            "wall s: the process's wall time as a user runs it.\n\n" + text + "\n"
        )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        from fem3d import run as fem3d_run

        raise SystemExit(run_cli(lambda argv: record_memory(fem3d_run.main, argv), sys.argv[2:], prog="fem3d.run"))
    raise SystemExit(run_cli(main, prog="dfg_benchmark"))
