"""A level-by-level model of one multigrid V-cycle on P GPUs, fed by profile_multigrid records.

    python scripts/level_model.py --profiles benchmarks/results/profile_multigrid_h200x4_p1.json \\
        benchmarks/results/profile_multigrid_h200x4_p2.json benchmarks/results/profile_multigrid_h200x4_p4.json \\
        --n 64 112 --ranks 8 64 512 --weak 40 --tag h200x4

The records (scripts/profile_multigrid.py on 1 rank, 2 ranks and optionally more, one box
N^3) give each level's smoothing time, its elements on the busiest rank, whether it is
partitioned and its interface sums and reductions per smoothing. The model:

    t1(E)       a smoothing of a level of E elements on one GPU: the 1-rank record's levels,
                linear in E between them, their least time below (kernel launches), the last
                slope beyond
    S(E, P)     a smoothing on P ranks: t1(E / P) + sums * s + reductions * r on a level cut
                among the ranks, t1(E) on a level every rank holds whole; r: --reduction-us,
                s: the cost of an interface sum fitted on the 2-rank record's levels (its
                launches, messages and waiting on the slowest rank); --latency-us adds to
                each message and reduction step (log2 P of them) of the predicted runs
    V(N, P)     2 * sum over the smoothed levels of S, plus the transfers and the coarse solve,
                the 2-rank record's remainder scaled by the finest level's elements per rank

The levels of a box and which are cut are fem3d's (fem3d.solvers.multigrid.coarse_grids,
distributed_grids); a box takes at most as many ranks as slab units. The model is checked
against each record of more than 2 ranks (per level and V-cycle) and predicts strong scaling
of the --n boxes and weak scaling of --weak elements per side per rank, naming for each the
first level that is no faster on P ranks than on one (cut and slower than whole, or held
whole by every rank): where coarse-grid work stops scaling, and its share of the V-cycle
from there down. Saves benchmarks/results/level_model_<tag>.{json,md}.
"""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import write_record
from script_options import check_each, check_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_gpu(record: dict):
    """t1(E) in ms from a 1-rank record's levels."""
    pts = sorted((lv["elements"], lv["smoothing_ms"]) for lv in record["levels"])
    e, t = np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts])
    slope = (t[-1] - t[-2]) / (e[-1] - e[-2]) if len(e) > 1 else t[-1] / e[-1]

    def t1(elements: float) -> float:
        if elements >= e[-1]:
            return float(t[-1] + slope * (elements - e[-1]))
        return float(max(t.min(), np.interp(elements, e, t)))
    return t1


def sum_cost(record: dict, t1, reduction_ms: float) -> float:
    """s in ms: the 2-rank record's time of a cut level's smoothing beyond t1 of its elements
    and its reductions, per interface sum, averaged over its cut levels."""
    cut = [lv for lv in record["levels"] if lv["partitioned"] and lv["sums_per_smoothing"]]
    if not cut:
        raise InputError("the 2-rank profile has no level cut among the ranks")
    return float(np.mean([(lv["smoothing_ms"] - t1(lv["elements"]) - lv["reductions_per_smoothing"] * reduction_ms)
                          / lv["sums_per_smoothing"] for lv in cut]))


def levels(n: int, ranks: int) -> list | None:
    """[(elements, cut)] of the smoothed levels of an n^3 box on ``ranks`` ranks (finest
    first), None where the box has fewer slab units than ranks."""
    from fem3d.solvers.multigrid import coarse_grids, distributed_grids

    grids = [(n, n, n), *coarse_grids((n, n, n))]
    cut = distributed_grids((n, n, n), ranks) if ranks > 1 else -1
    if ranks > 1 and n // 2 ** cut < ranks:
        return None
    return [(int(np.prod(g)), k <= cut) for k, g in enumerate(grids[:-1])]


def v_cycle(n: int, ranks: int, p: dict) -> dict | None:
    """The model's V-cycle of an n^3 box on ``ranks`` ranks: per level (elements per rank,
    cut, smoothing ms, and that level held whole) and the V-cycle ms."""
    shape = levels(n, ranks)
    if shape is None:
        return None
    extra = p["latency_ms"] * math.log2(ranks) if ranks > 1 else 0.0
    rows = []
    for elements, cut in shape:
        here = elements / ranks if cut else elements
        s = p["t1"](here) + (p["sums"] * (p["sum_ms"] + p["latency_ms"]) + p["reductions"] * (p["reduction_ms"] + extra) if cut else 0.0)
        rows.append({"elements": elements, "per_rank": here, "cut": cut, "smoothing_ms": s, "whole_ms": p["t1"](elements)})
    rest = p["rest_ms"] * (shape[0][0] / ranks) / p["rest_elements"]
    stops = next((k for k, r in enumerate(rows) if r["smoothing_ms"] >= r["whole_ms"]), None) if ranks > 1 else None
    v = 2 * sum(r["smoothing_ms"] for r in rows) + rest
    return {"n": n, "ranks": ranks, "levels": rows, "v_cycle_ms": v, "stops_scaling": stops,
            "share_from_there": 0.0 if stops is None else 2 * sum(r["smoothing_ms"] for r in rows[stops:]) / v}


def fit(records: list, reduction_ms: float, latency_ms: float) -> dict:
    """The model's parameters from the 1- and 2-rank records."""
    by_ranks = {r["ranks"]: r for r in records}
    one, two = by_ranks[1], by_ranks[2]
    t1 = one_gpu(one)
    s = sum_cost(two, t1, reduction_ms)
    cut = next(lv for lv in two["levels"] if lv["partitioned"])
    rest = two["cycle"]["v_cycle_ms"] - 2 * sum(lv["smoothing_ms"] for lv in two["levels"])
    return {"t1": t1, "sum_ms": s, "reduction_ms": reduction_ms, "latency_ms": 0.0, "sums": cut["sums_per_smoothing"],
            "reductions": cut["reductions_per_smoothing"], "rest_ms": max(0.0, rest), "rest_elements": two["levels"][0]["elements"],
            "predict_latency_ms": latency_ms}


def check(record: dict, p: dict) -> dict:
    """The model against a record of more than 2 ranks: per level and V-cycle, measured and modelled ms."""
    model = v_cycle(record["n"], record["ranks"], p)
    pairs = [{"elements": lv["elements"], "cut": m["cut"], "measured_ms": lv["smoothing_ms"], "model_ms": m["smoothing_ms"]}
             for lv, m in zip(record["levels"], model["levels"])]
    return {"ranks": record["ranks"], "n": record["n"], "levels": pairs, "v_cycle_measured_ms": record["cycle"]["v_cycle_ms"],
            "v_cycle_model_ms": model["v_cycle_ms"]}


def markdown(meta: dict, p: dict, checks: list, strong: list, weak: list) -> str:
    pct = lambda m, x: f"{100 * (m / x - 1):+.0f} %"  # noqa: E731
    lines = [f"# Level model of the multigrid V-cycle ({meta['device']})", "", f"`{meta['command']}`", "",
             f"Fitted on {meta['profiles'][0]} (one GPU, t1) and {meta['profiles'][1]} (2 ranks): an interface sum costs "
             f"{1e3 * p['sum_ms']:.0f} µs, a reduction {1e3 * p['reduction_ms']:.0f} µs; a cut level's smoothing does "
             f"{p['sums']} sums and {p['reductions']} reductions; predictions add {1e3 * p['predict_latency_ms']:g} µs per "
             "message and reduction step. Elements per rank of each smoothed level, finest first; a level marked * is held "
             "whole by every rank.", "", "## Check", "",
             "| ranks | N | level: elements per rank, measured / model ms | V-cycle measured / model ms |", "|---|---|---|---|"]
    for c in checks:
        lv = "; ".join(f"{lvl['elements']:,}{'' if lvl['cut'] else '*'}: {lvl['measured_ms']:.2f} / {lvl['model_ms']:.2f} "
                       f"({pct(lvl['model_ms'], lvl['measured_ms'])})" for lvl in c["levels"])
        lines.append(f"| {c['ranks']} | {c['n']} | {lv} | {c['v_cycle_measured_ms']:.1f} / {c['v_cycle_model_ms']:.1f} "
                     f"({pct(c['v_cycle_model_ms'], c['v_cycle_measured_ms'])}) |")
    for title, rows in (("Strong scaling", strong), ("Weak scaling", weak)):
        lines += ["", f"## {title}", "", "| N | ranks | smoothing ms per level (elements per rank) | V-cycle ms | "
                  + ("speed-up" if rows is strong else "efficiency") + " | first level no faster than on one GPU (share of the V-cycle "
                  "from there) |", "|---|---|---|---|---|---|"]
        for r in rows:
            if r["model"] is None:
                lines.append(f"| {r['n']} | {r['ranks']} | more ranks than slab units | | | |")
                continue
            m = r["model"]
            lv = "; ".join(f"{x['smoothing_ms']:.1f} ({x['per_rank']:,.0f}{'' if x['cut'] or r['ranks'] == 1 else '*'})"
                           for x in m["levels"])
            k = m["stops_scaling"]
            stop = "–" if k is None else (f"level {k}: {m['levels'][k]['per_rank']:,.0f} "
                                          f"{'per rank' if m['levels'][k]['cut'] else 'whole'} ({100 * m['share_from_there']:.0f} %)")
            lines.append(f"| {r['n']} | {r['ranks']} | {lv} | {m['v_cycle_ms']:.1f} | {r['ratio']:.2f} | {stop} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="python scripts/level_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", nargs="+", required=True, help="profile_multigrid records of one box on 1, 2 (and more) ranks")
    ap.add_argument("--n", type=int, nargs="+", default=[64, 112], help="boxes N^3 to predict strong scaling of (default 64 112)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 512], help="rank counts to predict (default 8 64 512)")
    ap.add_argument("--weak", type=int, default=40, help="elements per side per rank of the weak-scaling boxes (default 40)")
    ap.add_argument("--reduction-us", type=float, default=17.0, help="a reduction on the profiled link, µs (default 17: NCCL "
                    "allreduce of a few entries between two H200s)")
    ap.add_argument("--latency-us", type=float, default=0.0, help="added per message and reduction step in the predictions, µs "
                    "(default 0: the profiled link; about 10 between nodes)")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu", help="suffix of the result files")
    args = ap.parse_args(argv)
    ranks = check_each("--ranks", args.ranks, 2, 1 << 20, integer=True)
    sizes = check_each("--n", args.n, 6, 10000, integer=True)
    check_each("--weak", [args.weak], 6, 10000, integer=True)
    check_each("--reduction-us", [args.reduction_us], 0, 1e6)
    check_each("--latency-us", [args.latency_us], 0, 1e6)
    check_tag(args.tag)
    records = []
    for path in args.profiles:
        try:
            with open(path) as fh:
                rec = json.load(fh)
            rec.setdefault("ranks", 1)
            rec["levels"], rec["n"], rec["cycle"]  # noqa: B018 - a profile_multigrid record
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"--profiles {path}: cannot read a profile_multigrid record ({error!r})") from None
        records.append(rec)
    counts = sorted(r["ranks"] for r in records)
    if counts[:2] != [1, 2] or len(set(counts)) != len(counts) or len({r["n"] for r in records}) != 1:
        raise InputError(f"--profiles must be one box on 1 rank, 2 ranks and optionally more, each once (got ranks {counts})")
    records.sort(key=lambda r: r["ranks"])
    p = fit(records, args.reduction_us * 1e-3, args.latency_us * 1e-3)
    checks = [check(r, p) for r in records if r["ranks"] > 2]
    predicted = dict(p, latency_ms=p["predict_latency_ms"])
    strong = []
    for n in sizes:
        base = v_cycle(n, 1, p)["v_cycle_ms"]
        for q in [1, *counts[1:], *ranks]:
            m = v_cycle(n, q, predicted if q in ranks else p)
            strong.append({"n": n, "ranks": q, "model": m, "ratio": base / m["v_cycle_ms"] if m else None})
    weak, base = [], v_cycle(args.weak, 1, p)["v_cycle_ms"]
    for q in [1, *counts[1:], *ranks]:
        n = round(args.weak * q ** (1 / 3))
        m = v_cycle(n, q, predicted if q in ranks else p)
        weak.append({"n": n, "ranks": q, "model": m, "ratio": base / m["v_cycle_ms"] * (n ** 3 / q) / args.weak ** 3 if m else None})
    meta = {"command": "python scripts/level_model.py " + " ".join(argv), "device": records[0].get("device"),
            "profiles": [os.path.relpath(f, ROOT) for f in args.profiles]}
    text = markdown(meta, p, checks, strong, weak)
    params = {k: v for k, v in p.items() if k != "t1"}
    write_record(os.path.join(args.results, f"level_model_{args.tag}"),
                 {"meta": meta, "parameters": params, "checks": checks, "strong": strong, "weak": weak}, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="level_model"))
