"""Grid and time-step study of the square cylinder's Strouhal number (python -m tridiag.cases.cylinder's flow).

For every grid (ny x nx cells, refined by 2 in both directions) and every CFL number (time step
Δt = CFL min(hx, hy), within the wall-coupling cap of tridiag.cases.cylinder_flow.default_dt): Re 100
from rest with the start-up vortex blob to --t-first, then every other --re from that developed
wake to --t-later; St = f D / U_max from the second half of the probe signal (tridiag.cases.wake.shedding).
Per Re and CFL, Richardson extrapolation over the three finest grids: observed order
p = log2((St₁ − St₂)/(St₂ − St₃)) and St∞ = St₃ + (St₃ − St₂)/(2^p − 1) when the differences
shrink monotonically (0.5 < p < 4), else St₃ with the spread of the three as its band. The
error band of St∞ adds the change between the two time steps on the finest grid. Writes
strouhal_study[_TAG].json and .md to --out-dir, rewritten after every run.

  python scripts/strouhal_study.py --device gpu --tag h100
  python scripts/strouhal_study.py --grids 16x80,32x160,64x320 --t-first 20 --t-later 10 --device cpu   # smoke run
"""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from gpucfd.backend import get_backend
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from gpucfd.output import ensure_writable_dir, write_json

from script_options import check_tag
from tridiag.cases.channel import Channel, parse_grid
from tridiag.cases.cli import RE_RANGE
from tridiag.cases.cylinder_flow import CFL_LIMIT, CylinderFlow, default_dt
from tridiag.cases.wake import shedding

FIRST_RE = 100.0


def parse(argv):
    ap = ArgumentParser(prog="scripts/strouhal_study.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grids", default="80x400,160x800,320x1600", help="ny x nx cells, each twice the one before")
    ap.add_argument("--cfl", default="0.5,0.25", help="CFL numbers of the two time steps (default 0.5,0.25)")
    ap.add_argument(
        "--re", default="100,150,200", help=f"Reynolds numbers (default 100,150,200; {FIRST_RE:g} runs first)"
    )
    ap.add_argument("--t-first", type=float, default=150.0, help="time of the Re 100 run from rest (default 150)")
    ap.add_argument("--t-later", type=float, default=100.0, help="time of the runs from its wake (default 100)")
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto)")
    ap.add_argument("--tag", default="", help="suffix of the result files, e.g. h100")
    ap.add_argument("--out-dir", default="benchmarks/results", help="where the results go (default benchmarks/results)")
    return ap.parse_args(argv)


def check(args) -> tuple:
    grids = [parse_grid(g, "--grids") for g in args.grids.split(",")]
    if len(grids) < 3 or any((b[0], b[1]) != (2 * a[0], 2 * a[1]) for a, b in zip(grids, grids[1:])):
        raise InputError(f"--grids must list at least three grids, each twice the one before (got {args.grids!r})")
    try:
        cfls = [float(c) for c in args.cfl.split(",")]
        res = [float(r) for r in args.re.split(",")]
    except ValueError:
        raise InputError(f"--cfl and --re must be comma-separated numbers (got {args.cfl!r}, {args.re!r})") from None
    if len(cfls) != 2:
        raise InputError(f"--cfl must give two CFL numbers (got {args.cfl!r})")
    for c in cfls:
        check_range("--cfl", c, 0, CFL_LIMIT, low_open=True)
    for r in res:
        check_range("--re", r, *RE_RANGE)
    for name in ("t_first", "t_later"):
        check_range("--" + name.replace("_", "-"), getattr(args, name), 0, low_open=True)
    check_tag(args.tag)
    return grids, cfls, [FIRST_RE] + [r for r in res if r != FIRST_RE]


def run_case(backend, channel, re, cfl, t_end, start):
    """(row, flow): one run from rest (start None) or from ``start``'s fields."""
    flow = CylinderFlow(
        backend,
        channel,
        re,
        default_dt(channel, cfl, re),
        "auto",
        2,
        body_field=None if start is None else start.body.psi1,
    )
    if start is None:
        flow.kick(0.5)
    else:
        flow.load(start)
    t0 = time.perf_counter()
    flow.run(round(t_end / flow.dt), check_every=500)
    seconds = time.perf_counter() - t0
    st = shedding(np.asarray(flow.times), np.asarray(flow.signal))
    return {
        "re": re,
        "cfl": cfl,
        "dt": flow.dt,
        "steps": flow.steps,
        "seconds": seconds,
        "st": st.frequency if st else None,
        "periods": st.periods if st else 0,
        "spread": st.spread if st else None,
    }, flow


def richardson(values: list) -> dict:
    """St∞, observed order and band from St on three grids refined by 2 (coarse to fine)."""
    s1, s2, s3 = values
    d1, d2 = s1 - s2, s2 - s3
    if d1 * d2 > 0 and abs(d2) < abs(d1):
        p = math.log2(d1 / d2)
        if 0.5 < p < 4:
            ext = s3 + (s3 - s2) / (2**p - 1)
            return {"st": ext, "order": p, "band": abs(ext - s3)}
    return {"st": s3, "order": None, "band": max(abs(s1 - s3), abs(s2 - s3))}


def summarise(rows, grids, cfls, res) -> list:
    out = []
    for re in res:
        entry = {"re": re, "grids": {}, "richardson": {}}
        for cfl in cfls:
            sts = [
                next(
                    (r["st"] for r in rows if r["re"] == re and r["cfl"] == cfl and r["grid"] == f"{g[0]}x{g[1]}"), None
                )
                for g in grids
            ]
            entry["grids"][cfl] = sts
            if all(s is not None for s in sts[-3:]):
                entry["richardson"][cfl] = richardson(sts[-3:])
        fine = [entry["grids"][c][-1] for c in cfls]
        if len(entry["richardson"]) == len(cfls) and None not in fine:
            best = entry["richardson"][min(cfls)]
            dt_effect = abs(fine[0] - fine[1])
            entry.update(st=best["st"], band=best["band"] + dt_effect, dt_effect=dt_effect)
        out.append(entry)
    return out


def write(args, rows, grids, cfls, res, device) -> None:
    tag = f"_{args.tag}" if args.tag else ""
    base = os.path.join(args.out_dir, f"strouhal_study{tag}")
    table = summarise(rows, grids, cfls, res)
    write_json(
        base + ".json",
        {
            "device": device,
            "command": " ".join(["python scripts/strouhal_study.py", *sys.argv[1:]]),
            "runs": rows,
            "summary": table,
        },
    )
    names = [f"{g[0]}x{g[1]}" for g in grids]

    def fmt(v):
        return "–" if v is None else f"{v:.4f}"

    lines = [
        "# Strouhal number of the square cylinder in the channel (blockage 1/8): grids, time steps, Richardson",
        "",
        f"`python scripts/strouhal_study.py {' '.join(sys.argv[1:])}` on {device}. Re {FIRST_RE:g} from rest to "
        f"t = {args.t_first:g}, the others from its wake to t = {args.t_later:g}; St from the second half of the probe "
        "signal (v, 2D behind the rear face). Δt = CFL min(hx, hy).",
        "",
        "| Re | CFL | " + " | ".join(names) + " | observed order | St (Richardson) |",
        "|---|---|" + "---|" * (len(names) + 2),
    ]
    for e in table:
        for cfl in cfls:
            r = e["richardson"].get(cfl)
            order = "–" if not r or r["order"] is None else f"{r['order']:.2f}"
            lines.append(
                f"| {e['re']:g} | {cfl:g} | "
                + " | ".join(fmt(s) for s in e["grids"][cfl])
                + f" | {order} | {fmt(r['st']) if r else '–'} ± {fmt(r['band']) if r else '–'} |"
            )
    lines += [
        "",
        "| Re | St (finest CFL, extrapolated) | error band (Richardson + time step) "
        "| time-step effect on the finest grid |",
        "|---|---|---|---|",
    ]
    lines += [f"| {e['re']:g} | {fmt(e.get('st'))} | {fmt(e.get('band'))} | {fmt(e.get('dt_effect'))} |" for e in table]
    lines += [
        "",
        "Runs:",
        "",
        "| grid | Re | CFL | Δt | steps | St | periods | period spread | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['grid']} | {r['re']:g} | {r['cfl']:g} | {r['dt']:.5f} | {r['steps']} | {fmt(r['st'])} | "
        f"{r['periods']} | "
        f"{'–' if r['spread'] is None else format(r['spread'], '.4f')} | {r['seconds']:.1f} |"
        + (f" {r['error'].split(':')[0]}" if "error" in r else "")
        for r in rows
    ]
    with open(base + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    grids, cfls, res = check(args)
    ensure_writable_dir(args.out_dir, "--out-dir")
    backend = get_backend(args.device)
    rows = []
    for ny, nx in grids:
        channel = Channel.create(ny, nx)
        for cfl in cfls:
            first = None
            for re in res:
                try:
                    row, flow = run_case(
                        backend, channel, re, cfl, args.t_first if first is None else args.t_later, first
                    )
                except ConvergenceError as exc:  # recorded; the runs that would start from it are skipped
                    rows.append(
                        {
                            "grid": f"{ny}x{nx}",
                            "re": re,
                            "cfl": cfl,
                            "dt": default_dt(channel, cfl, re),
                            "steps": 0,
                            "seconds": 0.0,
                            "st": None,
                            "periods": 0,
                            "spread": None,
                            "error": str(exc),
                        }
                    )
                    print(f"{ny}x{nx} CFL {cfl:g} Re {re:g}: {exc}", flush=True)
                    write(args, rows, grids, cfls, res, backend.describe())
                    break
                first = first or flow
                row["grid"] = f"{ny}x{nx}"
                rows.append(row)
                print(
                    f"{ny}x{nx} CFL {cfl:g} Re {re:g}: St {row['st']} ({row['periods']} periods, "
                    f"{row['seconds']:.1f} s)",
                    flush=True,
                )
                write(args, rows, grids, cfls, res, backend.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scripts/strouhal_study.py"))
