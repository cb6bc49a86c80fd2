"""DFG 2D-3 in time (John 2004): c_D,max, c_L,max, c_L,min and Delta p(8), and the time to them.

    python scripts/bench_dfg2d3.py --device gpu --tag h100 --runs slab:1:bdf2:0.01 fine:0:midpoint:0.01

Each run MESH:REFINE:SCHEME:DT poses meshes/dfg2d/dfg_2d_3_slab.toml on MESH, ``slab`` (the
committed meshes/dfg2d/slab.msh, one element thick) or ``fine`` (the same layout four times
finer in the plane, one element of 0.0125 thick: meshes/dfg2d/make_slab.py with FINE, made in
the runs folder), refined REFINE times, with that scheme and step: the case file is written
into the runs folder (the force coefficients' area D t and the points' z follow the slab's
thickness t) and run as a user runs it, ``python -m fem3d.run CASE --refine R --device D
--quiet --no-vtu --no-plots``, in its own process (after one untimed short run that compiles
the kernels, unless ``--no-warmup``). A row per run: elements, unknowns, scheme, dt, steps,
Newton steps, Krylov iterations per Newton step, seconds per step, the process wall time, and
the quantities (keys c_d_max, c_l_max, c_l_min, delta_p_end) with their relative errors
against John 2004 (value / reference - 1: negative where a magnitude falls short).
``--t-end`` shortens every run (a check of the script). Saves
benchmarks/results/dfg2d3_<tag>.{json,md} after every run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import write_record
from script_options import check_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "meshes", "dfg2d", "dfg_2d_3_slab.toml")
DIAMETER, SLAB = 0.1, 0.05  # the cylinder's, and the committed slab's thickness
FINE = dict(around=96, rings=16, upstream=4, downstream=80, thickness=0.0125)  # make_slab.py's fine slab
REFERENCES = {"c_d_max": 2.950921575, "c_l_max": 0.47795, "delta_p_end": -0.1116}  # John 2004
SCHEMES = ("bdf2", "midpoint")


def parse_run(spec: str) -> dict:
    """MESH:REFINE:SCHEME:DT as a dict; InputError naming --runs."""
    parts = spec.split(":")
    try:
        mesh, refine, scheme, dt = parts[0], int(parts[1]), parts[2], float(parts[3])
    except (IndexError, ValueError):
        raise InputError(f"--runs: {spec!r} is not MESH:REFINE:SCHEME:DT (e.g. slab:1:bdf2:0.01)") from None
    if len(parts) != 4 or mesh not in ("slab", "fine") or scheme not in SCHEMES or not 0 <= refine <= 3 or not dt > 0:
        raise InputError(f"--runs: {spec!r}: MESH slab or fine, REFINE 0 to 3, SCHEME {' or '.join(SCHEMES)}, DT > 0")
    return {"mesh": mesh, "refine": refine, "scheme": scheme, "dt": dt}


def mesh_file(kind: str, folder: str) -> tuple[str, float]:
    """(mesh file, slab thickness) of ``kind``: the committed slab, or the fine one made in ``folder``."""
    if kind == "slab":
        return os.path.join(ROOT, "meshes", "dfg2d", "slab.msh"), SLAB
    path = os.path.join(folder, "fine_slab.msh")
    if not os.path.isfile(path):
        options = [f"--{k}={v}" for k, v in FINE.items()]
        paths = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        made = subprocess.run(
            [sys.executable, os.path.join(ROOT, "meshes", "dfg2d", "make_slab.py"), *options, "--out", path],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": paths},
        )
        if made.returncode:
            raise InputError(f"meshes/dfg2d/make_slab.py failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
    return path, FINE["thickness"]


def case_text(mesh: str, thickness: float, scheme: str, dt: float, t_end: float | None) -> str:
    """The committed 2D-3 case on ``mesh`` (of that thickness), with the scheme, step and end time."""
    with open(CASE) as fh:
        text = fh.read()
    swaps = [
        (r'file = "slab\.msh"', f'file = "{mesh}"'),
        (r"area = 0\.005", f"area = {DIAMETER * thickness!r}"),
        (r"0\.025\]", f"{thickness / 2!r}]"),
        (r"dt = 0\.01", f"dt = {dt!r}"),
        (r'scheme = "bdf2"', f'scheme = "{scheme}"'),
    ]
    if t_end is not None:
        swaps.append((r"t_end = 8", f"t_end = {t_end!r}"))
    for pattern, new in swaps:
        text, count = re.subn(pattern, new, text)
        if not count:
            raise RuntimeError(f"{CASE} no longer holds {pattern}")
    return text


def row_of(spec: dict, command: str, wall: float, s: dict) -> dict:
    """What a run measured, from its summary.json ``s``."""
    t, series = s["time"], s["time"]["series"]
    values = {
        "c_d_max": series["forces.cylinder.coefficients.x"]["max"],
        "c_l_max": series["forces.cylinder.coefficients.y"]["max"],
        "c_l_min": series["forces.cylinder.coefficients.y"]["min"],
        "delta_p_end": series["differences.delta_p"]["end"],
    }
    return {
        **spec,
        "command": command,
        "device": s["device"],
        "converged": s["converged"],
        "elements": s["mesh"]["elements"],
        "unknowns": s["dofs"],
        "time_step": spec["dt"],
        "steps": t["steps"],
        "newton_steps": t["newton_steps"],
        "linear_iterations_per_newton_step": t["linear_iterations_per_newton_step"],
        "seconds_per_step": t["seconds_per_step"],
        "wall_s": wall,
        **values,
        "relative_errors": {k: values[k] / v - 1 for k, v in REFERENCES.items()},
        "times_s": s["times_s"],
    }


def run(args, spec: dict) -> dict:
    """One timed run of ``spec``; its row (or a row with the error)."""
    name = f"{spec['mesh']}_r{spec['refine']}_{spec['scheme']}_dt{spec['dt']:g}"
    folder = os.path.join(os.path.abspath(args.runs_folder), name)
    os.makedirs(folder, exist_ok=True)
    mesh, thickness = mesh_file(spec["mesh"], os.path.abspath(args.runs_folder))
    case = os.path.join(folder, "case.toml")
    with open(case, "w") as fh:
        fh.write(case_text(mesh, thickness, spec["scheme"], spec["dt"], args.t_end))
    argv = [case, "--refine", str(spec["refine"]), "--device", args.device, "--quiet", "--no-vtu", "--no-plots"]
    argv += ["--out", os.path.join(folder, "out")]
    command = "python -m fem3d.run " + " ".join(argv)
    print(command, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fem3d.run", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["no error output"]
        return {**spec, "command": command, "error": f"exit {proc.returncode}: {lines[-1]}"}
    with open(os.path.join(folder, "out", "summary.json")) as fh:
        return row_of(spec, command, wall, json.load(fh))


def table(rows: list) -> str:
    lines = [
        "| mesh | refine | elements | unknowns | scheme | dt | steps | Newton / step | Krylov / Newton | s / step "
        "| wall s | c_D,max (error) | c_L,max (error) | c_L,min | Δp(8) (error) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['mesh']} | {r['refine']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error']} |" + " |" * 12)
            continue
        e = r["relative_errors"]
        lines.append(
            head + f"| {r['elements']:,} | {r['unknowns']:,} | {r['scheme']} | {r['dt']:g} | {r['steps']} "
            f"| {r['newton_steps'] / max(r['steps'], 1):.2f} | {r['linear_iterations_per_newton_step']:.2f} "
            f"| {r['seconds_per_step']:.3f} | {r['wall_s']:.1f} | {r['c_d_max']:.6f} ({100 * e['c_d_max']:+.3f} %) "
            f"| {r['c_l_max']:.5f} ({100 * e['c_l_max']:+.2f} %) | {r['c_l_min']:.5f} "
            f"| {r['delta_p_end']:.5f} ({100 * e['delta_p_end']:+.2f} %) |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="scripts/bench_dfg2d3.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="MESH:REFINE:SCHEME:DT, e.g. slab:1:bdf2:0.01")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--t-end", type=float, default=None, help="end every run at this time (default 8: the case's)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first short run")
    ap.add_argument("--runs-folder", default="bench-dfg2d3", help="folder for the meshes, case files and outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", required=True, help="suffix of the result files, e.g. cpu or h100")
    args = ap.parse_args(argv)
    specs = [parse_run(r) for r in args.runs]
    if args.t_end is not None and not 0 < args.t_end <= 8:
        raise InputError(f"--t-end must be > 0 and <= 8 (got {args.t_end:g})")
    base = os.path.join(args.results, f"dfg2d3_{check_tag(args.tag)}")
    command = "python scripts/bench_dfg2d3.py " + " ".join(argv)
    if not args.no_warmup:
        run(argparse_copy(args, t_end=2 * specs[0]["dt"]), specs[0])
    rows = []
    for spec in specs:
        rows.append(run(args, spec))
        device = next((r["device"] for r in rows if "device" in r), "n/a")
        write_record(
            base,
            {"command": command, "references": REFERENCES, "rows": rows},
            f"# DFG 2D-3 in time ({device})\n\n`{command}`\n\n"
            + ("After one untimed short run; " if not args.no_warmup else "No warm-up run; ")
            + "wall s: the process's, as a user runs it; errors against John 2004 (c_D,max 2.950921575, "
            "c_L,max 0.47795, Δp(8) −0.1116) as value / reference − 1.\n\n" + table(rows) + "\n",
        )
    return 0


def argparse_copy(args, **changes):
    """``args`` with ``changes`` (a warm-up run's)."""
    import argparse

    return argparse.Namespace(**{**vars(args), **changes})


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/bench_dfg2d3.py"))
