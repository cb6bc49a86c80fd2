"""The DFG cylinder benchmarks in time, and the time to their answers: 2D-3 (John 2004),
2D-2 (periodic, Schäfer & Turek 1996) and 3D-3Z (FeatFlow's finest level, Bayraktar, Mierka
& Turek 2012).

    python scripts/bench_dfg_time.py --case 2d3 --device gpu --tag h100 --runs fine:0:midpoint:0.01
    python scripts/bench_dfg_time.py --case 3d3z --device gpu --tag h100 --runs channel:1:bdf2:0.01:1e-3

Each run MESH:REFINE:SCHEME:DT[:TOLERANCE] poses the case's committed case file
(meshes/dfg2d/dfg_2d_3_slab.toml, dfg_2d_2_slab.toml, meshes/dfg3d/dfg_3d_3z.toml) on MESH,
refined REFINE times, with that scheme and step (and, with a TOLERANCE, adaptive steps from
DT). The 2D cases' meshes: ``slab`` (the committed meshes/dfg2d/slab.msh, one element thick),
``medium`` (the same layout finer in the plane: 64 cells round the cylinder, 10 rings, 3
cells upstream and 40 downstream; 0.05 thick) or ``fine`` (128 round, 24 rings, 6 upstream,
160 downstream; 0.0125 thick), both made by meshes/dfg2d/make_slab.py with MADE's layouts in
the runs folder; 3D-3Z's: ``channel`` (the
committed meshes/dfg3d/channel_coarse.msh) or ``layer`` (channel_boundary_layer.msh, cells
at the cylinder up to 139 times longer than thick). The case file is written into the runs folder
(the 2D force coefficients' area D t and the points' z follow the slab's thickness t) and run
as a user runs it, ``python -m fem3d.run CASE --refine R --device D --quiet --no-vtu
--no-plots``, in its own process (after one untimed short run that compiles the kernels,
unless ``--no-warmup``). A row per run: elements, unknowns, scheme, dt (the first step where
adaptive), tolerance, steps, steps made again, Newton steps, Krylov iterations per Newton
step, seconds per step, the process wall time, and the case's quantities (keys c_d_max,
c_l_max, c_l_min, delta_p_end, strouhal; 2D-2's over the last periods) with their relative
errors against the references of fem3d/reference_data/dfg_cylinder_unsteady.csv (value /
reference - 1: negative where a magnitude falls short) or, for 2D-2, whether they lie in
the 1996 intervals. ``--t-end`` shortens every run (a check of the script). Saves
benchmarks/results/dfg<case>_<tag>.{json,md} after every run; ``--add`` adds the rows to
that saved record (its commands listed in order), so that one record can hold runs made in
several calls.
"""

from __future__ import annotations

import argparse
import csv
import importlib.resources
import json
import os
import re
import subprocess
import sys
import time

from fem3d.solvers.time_stepping import SCHEMES
from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import saved_record, write_record
from script_options import check_tag
from timed_runs import time_row

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIAMETER, SLAB = 0.1, 0.05  # the cylinder's, and the committed slab's thickness
MADE = {  # make_slab.py's slabs made in the runs folder: the fine one, and a medium one for the CPU
    "fine": dict(around=128, rings=24, upstream=6, downstream=160, thickness=0.0125),
    "medium": dict(around=64, rings=10, upstream=3, downstream=40, thickness=SLAB),
}
CASES = {  # --case: (name in the references, case file, meshes, t_end of the case, title)
    "2d3": ("2D-3", "meshes/dfg2d/dfg_2d_3_slab.toml", ("slab", "medium", "fine"), 8.0, "DFG 2D-3 in time"),
    "2d2": ("2D-2", "meshes/dfg2d/dfg_2d_2_slab.toml", ("slab", "medium", "fine"), 8.0, "DFG 2D-2 (periodic) in time"),
    "3d3z": ("3D-3Z", "meshes/dfg3d/dfg_3d_3z.toml", ("channel", "layer"), 8.0, "DFG 3D-3Z in time"),
}
COLUMNS = {  # quantity key: history column of the run
    "c_d": "forces.cylinder.coefficients.x",
    "c_l": "forces.cylinder.coefficients.y",
    "delta_p": "differences.delta_p",
}


def references(case: str) -> dict:
    """{quantity: {"reference", "t", "source", "low", "high"}} of ``case`` (2D-3, 2D-2, 3D-3Z),
    quantity keys in lower case (c_d_max)."""
    path = importlib.resources.files("fem3d").joinpath("reference_data", "dfg_cylinder_unsteady.csv")
    out = {}
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row["case"] == case:

                def number(key):
                    return float(row[key]) if row[key] else None

                out[row["quantity"].lower()] = {
                    "reference": number("reference"),
                    "t": number("t"),
                    "source": row["source"],
                    "low": number("bound_low_1996"),
                    "high": number("bound_high_1996"),
                }
    return out


def parse_run(spec: str, meshes: tuple) -> dict:
    """MESH:REFINE:SCHEME:DT[:TOLERANCE] as a dict; InputError naming --runs."""
    parts = spec.split(":")
    try:
        mesh, refine, scheme, dt = parts[0], int(parts[1]), parts[2], float(parts[3])
        tolerance = float(parts[4]) if len(parts) == 5 else None
    except (IndexError, ValueError):
        raise InputError(f"--runs: {spec!r} is not MESH:REFINE:SCHEME:DT[:TOLERANCE] (e.g. slab:1:bdf2:0.01)") from None
    good = len(parts) in (4, 5) and mesh in meshes and scheme in SCHEMES and 0 <= refine <= 3 and dt > 0
    if not good or not (tolerance is None or 0 < tolerance < 1):
        raise InputError(
            f"--runs: {spec!r}: MESH {' or '.join(meshes)}, REFINE 0 to 3, SCHEME {' or '.join(SCHEMES)}, DT > 0, "
            "TOLERANCE in (0, 1)"
        )
    return {"mesh": mesh, "refine": refine, "scheme": scheme, "dt": dt, "tolerance": tolerance}


def mesh_file(kind: str, folder: str) -> tuple[str, float | None]:
    """(mesh file, slab thickness or None) of ``kind``: a committed mesh, or a slab of MADE made in ``folder``."""
    if kind in ("channel", "layer"):
        name = "channel_coarse.msh" if kind == "channel" else "channel_boundary_layer.msh"
        return os.path.join(ROOT, "meshes", "dfg3d", name), None
    if kind == "slab":
        return os.path.join(ROOT, "meshes", "dfg2d", "slab.msh"), SLAB
    layout = MADE[kind]
    path = os.path.join(folder, f"{kind}_slab.msh")
    if not os.path.isfile(path):
        options = [f"--{k}={v}" for k, v in layout.items()]
        paths = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        made = subprocess.run(
            [sys.executable, os.path.join(ROOT, "meshes", "dfg2d", "make_slab.py"), *options, "--out", path],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": paths},
        )
        if made.returncode:
            raise InputError(f"meshes/dfg2d/make_slab.py failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
    return path, layout["thickness"]


def case_text(case_file: str, mesh: str, thickness: float | None, spec: dict, t_end: float | None) -> str:
    """The committed case on ``mesh`` (a slab of that thickness, or None), with the run's steps."""
    with open(case_file) as fh:
        text = fh.read()
    steps = f"dt = {spec['dt']!r}" + ("" if spec["tolerance"] is None else f"\ntolerance = {spec['tolerance']!r}")
    swaps = [
        (r'file = "[\w.]+\.msh"', f'file = "{mesh}"'),
        (r"dt = 0\.01", steps),
        (r'scheme = "bdf2"', f'scheme = "{spec["scheme"]}"'),
    ]
    if thickness is not None:
        swaps += [(r"area = 0\.005", f"area = {DIAMETER * thickness!r}"), (r"0\.025\]", f"{thickness / 2!r}]")]
    if t_end is not None:
        swaps.append((r"t_end = \d+", f"t_end = {t_end!r}"))
    for pattern, new in swaps:
        text, count = re.subn(pattern, new, text)
        if not count:
            raise RuntimeError(f"{case_file} no longer holds {pattern}")
    return text


def quantities(case: str, s: dict) -> dict:
    """The case's quantities from a run's summary.json ``s``: extrema over the run, or (2D-2)
    over the last periods with the Strouhal number (None where the flow is not yet periodic)."""
    t = s["time"]
    if case == "2D-2":
        periodic = t["periodic"]
        drag, lift = periodic.get(COLUMNS["c_d"]), periodic.get(COLUMNS["c_l"])
        return {
            "strouhal": (t.get("strouhal") or {}).get("value"),
            "c_d_max": drag and drag["max"],
            "c_l_max": lift and lift["max"],
        }
    series = t["series"]
    return {
        "c_d_max": series[COLUMNS["c_d"]]["max"],
        "t_c_d_max": series[COLUMNS["c_d"]]["t_max"],
        "c_l_max": series[COLUMNS["c_l"]]["max"],
        "t_c_l_max": series[COLUMNS["c_l"]]["t_max"],
        "c_l_min": series[COLUMNS["c_l"]]["min"],
        "t_c_l_min": series[COLUMNS["c_l"]]["t_min"],
        "delta_p_end": series[COLUMNS["delta_p"]]["end"],
    }


def row_of(case: str, spec: dict, command: str, wall: float, s: dict, refs: dict) -> dict:
    """What a run measured, from its summary.json ``s``."""
    values = quantities(case, s)
    found = {k: v for k, v in values.items() if k in refs and v is not None}
    return {
        **time_row(spec, command, wall, s),
        **values,
        "relative_errors": {k: v / refs[k]["reference"] - 1 for k, v in found.items() if refs[k]["reference"]},
        "in_1996_bounds": {k: refs[k]["low"] <= v <= refs[k]["high"] for k, v in found.items() if refs[k]["low"]},
        "times_s": s["times_s"],
    }


def run(args, spec: dict) -> dict:
    """One timed run of ``spec``; its row (or a row with the error)."""
    case, case_file = CASES[args.case][:2]
    name = f"{spec['mesh']}_r{spec['refine']}_{spec['scheme']}_dt{spec['dt']:g}"
    name += "" if spec["tolerance"] is None else f"_tol{spec['tolerance']:g}"
    folder = os.path.join(os.path.abspath(args.runs_folder), name)
    os.makedirs(folder, exist_ok=True)
    mesh, thickness = mesh_file(spec["mesh"], os.path.abspath(args.runs_folder))
    path = os.path.join(folder, "case.toml")
    with open(path, "w") as fh:
        fh.write(case_text(os.path.join(ROOT, case_file), mesh, thickness, spec, args.t_end))
    argv = [path, "--refine", str(spec["refine"]), "--device", args.device, "--quiet", "--no-vtu", "--no-plots"]
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
        return row_of(case, spec, command, wall, json.load(fh), references(case))


def shown(r: dict, key: str, digits: int) -> str:
    """A quantity with its error or whether it lies in the 1996 interval."""
    v = r.get(key)
    if v is None:
        return "n/a"
    if key in r["relative_errors"]:
        return f"{v:.{digits}f} ({100 * r['relative_errors'][key]:+.3f} %)"
    if key in r["in_1996_bounds"]:
        return f"{v:.{digits}f} ({'inside' if r['in_1996_bounds'][key] else 'outside'})"
    return f"{v:.{digits}f}"


def table(case: str, rows: list) -> str:
    keys = (
        [("strouhal", "St", 4), ("c_d_max", "c_D,max", 4), ("c_l_max", "c_L,max", 4)]
        if case == "2D-2"
        else [("c_d_max", "c_D,max", 5), ("c_l_max", "c_L,max", 5), ("c_l_min", "c_L,min", 5)]
        + [("delta_p_end", "Δp(8)", 5)]
    )
    lines = [
        "| mesh | refine | elements | unknowns | scheme | dt | tolerance | steps (again) | Newton / step "
        "| Krylov / Newton | s / step | wall s | " + " | ".join(title for _, title, _ in keys) + " |",
        "|" + "---|" * (12 + len(keys)),
    ]
    for r in rows:
        head = f"| {r['mesh']} | {r['refine']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error']} |" + " |" * (9 + len(keys)))
            continue
        tolerance = "fixed" if r["tolerance"] is None else f"{r['tolerance']:g}"
        lines.append(
            head + f"| {r['elements']:,} | {r['unknowns']:,} | {r['scheme']} | {r['dt']:g} | {tolerance} "
            f"| {r['steps']} ({r['rejected_steps']}) | {r['newton_steps'] / max(r['steps'], 1):.2f} "
            f"| {r['linear_iterations_per_newton_step']:.2f} | {r['seconds_per_step']:.3f} | {r['wall_s']:.1f} | "
            + " | ".join(shown(r, key, digits) for key, _, digits in keys)
            + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="scripts/bench_dfg_time.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True, choices=sorted(CASES), help="the benchmark case")
    ap.add_argument("--runs", nargs="+", required=True, help="MESH:REFINE:SCHEME:DT[:TOLERANCE], e.g. slab:1:bdf2:0.01")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--t-end", type=float, default=None, help="end every run at this time (default: the case's)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first short run")
    ap.add_argument("--runs-folder", default="bench-dfg-time", help="folder for the meshes, case files and outputs")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", required=True, help="suffix of the result files, e.g. cpu or h100")
    ap.add_argument("--add", action="store_true", help="add the rows to the tag's saved record")
    args = ap.parse_args(argv)
    case, _, meshes, t_end, title = CASES[args.case]
    specs = [parse_run(r, meshes) for r in args.runs]
    if args.t_end is not None and not 0 < args.t_end <= t_end:
        raise InputError(f"--t-end must be > 0 and <= {t_end:g} (got {args.t_end:g})")
    base = os.path.join(args.results, f"dfg{args.case}_{check_tag(args.tag)}")
    if args.add and not os.path.exists(base + ".json"):
        raise InputError(f"--add: no saved record {base}.json")
    rows, commands = saved_record(base) if args.add else ([], [])
    commands.append("python scripts/bench_dfg_time.py " + " ".join(argv))
    refs = references(case)
    if not args.no_warmup:
        run(argparse.Namespace(**{**vars(args), "t_end": 2 * specs[0]["dt"]}), specs[0])
    for spec in specs:
        rows.append(run(args, spec))
        device = next((r["device"] for r in rows if "device" in r), "n/a")
        against = "; ".join(
            f"{k} {v['reference']:g}" if v["reference"] is not None else f"{k} in [{v['low']:g}, {v['high']:g}]"
            for k, v in refs.items()
        )
        write_record(
            base,
            {"commands": commands, "case": case, "references": refs, "rows": rows},
            f"# {title} ({device})\n\n"
            + "".join(f"`{c}`\n\n" for c in commands)
            + "Each command after one untimed short run unless it says --no-warmup; "
            + f"wall s: the process's, as a user runs it; references ({refs[next(iter(refs))]['source']}): "
            f"{against}; errors as value / reference − 1.\n\n" + table(case, rows) + "\n",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/bench_dfg_time.py"))
