"""A level-by-level model of one multigrid V-cycle on P GPUs, fed by profile_multigrid records.

    python scripts/level_model.py --profiles benchmarks/results/profile_multigrid_h200x4_p1.json \\
        benchmarks/results/profile_multigrid_h200x4_p2.json benchmarks/results/profile_multigrid_h200x4_p4.json \\
        --shared benchmarks/results/profile_multigrid_h200x4_p2_shared.json \\
        benchmarks/results/profile_multigrid_h200x4_p4_shared.json --n 64 112 --ranks 8 64 512 --weak 40 --tag h200x4

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
from there down.

Ranks sharing a GPU (--allow-shared-gpu; ``--shared``: records of one box on 2 and more ranks
whose ``gpus`` are fewer than their ranks) take turns on it: a level's smoothing costs
g * t1(elements per rank) for g ranks per GPU, plus the sums and reductions, whose cost s is
fitted anew on the shared 2-rank record (host-staged MPI, not NCCL) and checked against the
others. Saves benchmarks/results/level_model_<tag>.{json,md}.
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


def sharing(record: dict) -> float:
    """Ranks per GPU of a record (its ``gpus``: the devices its ranks ran on; 1 without)."""
    return record["ranks"] / record["gpus"] if record.get("gpus") else 1.0


def sum_cost(record: dict, t1, reduction_ms: float) -> float:
    """s in ms: the 2-rank record's time of a cut level's smoothing beyond its ranks' turns of
    t1 on a GPU (:func:`sharing`) and its reductions, per interface sum, averaged over its cut
    levels."""
    cut = [lv for lv in record["levels"] if lv["partitioned"] and lv["sums_per_smoothing"]]
    if not cut:
        raise InputError("the 2-rank profile has no level cut among the ranks")
    g = sharing(record)
    return float(
        np.mean(
            [
                (lv["smoothing_ms"] - g * t1(lv["elements"]) - lv["reductions_per_smoothing"] * reduction_ms)
                / lv["sums_per_smoothing"]
                for lv in cut
            ]
        )
    )


def levels(n: int, ranks: int) -> list | None:
    """[(elements, cut)] of the smoothed levels of an n^3 box on ``ranks`` ranks (finest
    first), None where the box has fewer slab units than ranks."""
    from fem3d.solvers.multigrid import coarse_grids, distributed_grids

    grids = [(n, n, n), *coarse_grids((n, n, n))]
    cut = distributed_grids((n, n, n), ranks) if ranks > 1 else -1
    if ranks > 1 and n // 2**cut < ranks:
        return None
    return [(int(np.prod(g)), k <= cut) for k, g in enumerate(grids[:-1])]


def v_cycle(n: int, ranks: int, p: dict, sharing: float = 1.0) -> dict | None:
    """The model's V-cycle of an n^3 box on ``ranks`` ranks, ``sharing`` of them per GPU: per
    level (elements per rank, cut, smoothing ms, and that level held whole on one GPU) and the
    V-cycle ms."""
    shape = levels(n, ranks)
    if shape is None:
        return None
    extra = p["latency_ms"] * math.log2(ranks) if ranks > 1 else 0.0
    rows = []
    for elements, cut in shape:
        here = elements / ranks if cut else elements
        s = sharing * p["t1"](here) + (
            p["sums"] * (p["sum_ms"] + p["latency_ms"]) + p["reductions"] * (p["reduction_ms"] + extra) if cut else 0.0
        )
        rows.append(
            {"elements": elements, "per_rank": here, "cut": cut, "smoothing_ms": s, "whole_ms": p["t1"](elements)}
        )
    rest = p["rest_ms"] * (shape[0][0] / ranks * sharing) / p["rest_work"]
    stops = next((k for k, r in enumerate(rows) if r["smoothing_ms"] >= r["whole_ms"]), None) if ranks > 1 else None
    v = 2 * sum(r["smoothing_ms"] for r in rows) + rest
    return {
        "n": n,
        "ranks": ranks,
        "levels": rows,
        "v_cycle_ms": v,
        "stops_scaling": stops,
        "share_from_there": 0.0 if stops is None else 2 * sum(r["smoothing_ms"] for r in rows[stops:]) / v,
    }


def fit(one: dict, two: dict, reduction_ms: float, latency_ms: float) -> dict:
    """The model's parameters from the 1- and a 2-rank record."""
    t1 = one_gpu(one)
    s = sum_cost(two, t1, reduction_ms)
    cut = next(lv for lv in two["levels"] if lv["partitioned"])
    rest = two["cycle"]["v_cycle_ms"] - 2 * sum(lv["smoothing_ms"] for lv in two["levels"])
    return {
        "t1": t1,
        "sum_ms": s,
        "reduction_ms": reduction_ms,
        "latency_ms": 0.0,
        "sums": cut["sums_per_smoothing"],
        "reductions": cut["reductions_per_smoothing"],
        "rest_ms": max(0.0, rest),
        "rest_work": two["levels"][0]["elements"] * sharing(two),
        "gpus": two.get("gpus"),
        "predict_latency_ms": latency_ms,
    }


def check(record: dict, p: dict) -> dict:
    """The model against a record of more than 2 ranks: per level and V-cycle, measured and modelled ms."""
    model = v_cycle(record["n"], record["ranks"], p, sharing(record))
    pairs = [
        {"elements": lv["elements"], "cut": m["cut"], "measured_ms": lv["smoothing_ms"], "model_ms": m["smoothing_ms"]}
        for lv, m in zip(record["levels"], model["levels"])
    ]
    return {
        "ranks": record["ranks"],
        "gpus": record.get("gpus"),
        "n": record["n"],
        "levels": pairs,
        "v_cycle_measured_ms": record["cycle"]["v_cycle_ms"],
        "v_cycle_model_ms": model["v_cycle_ms"],
    }


def check_rows(checks: list) -> list:
    """Markdown rows of :func:`check`'s results."""
    pct = lambda m, x: f"{100 * (m / x - 1):+.0f} %"  # noqa: E731
    lines = [
        "| ranks | GPUs | N | level: elements per rank, measured / model ms | V-cycle measured / model ms |",
        "|---|---|---|---|---|",
    ]
    for c in checks:
        lv = "; ".join(
            f"{lvl['elements']:,}{'' if lvl['cut'] else '*'}: {lvl['measured_ms']:.2f} / {lvl['model_ms']:.2f} "
            f"({pct(lvl['model_ms'], lvl['measured_ms'])})"
            for lvl in c["levels"]
        )
        lines.append(
            f"| {c['ranks']} | {c['gpus'] or c['ranks']} | {c['n']} | {lv} | {c['v_cycle_measured_ms']:.1f} / "
            f"{c['v_cycle_model_ms']:.1f} ({pct(c['v_cycle_model_ms'], c['v_cycle_measured_ms'])}) |"
        )
    return lines


def markdown(meta: dict, p: dict, checks: list, strong: list, weak: list, shared: tuple | None = None) -> str:
    lines = [
        f"# Level model of the multigrid V-cycle ({meta['device']})",
        "",
        f"`{meta['command']}`",
        "",
        f"Fitted on {meta['profiles'][0]} (one GPU, t1) and {meta['profiles'][1]} (2 ranks): an interface sum costs "
        f"{1e3 * p['sum_ms']:.0f} µs, a reduction {1e3 * p['reduction_ms']:.0f} µs; a cut level's smoothing does "
        f"{p['sums']} sums and {p['reductions']} reductions; predictions add {1e3 * p['predict_latency_ms']:g} µs per "
        "message and reduction step. Elements per rank of each smoothed level, finest first; a level marked * is held "
        "whole by every rank.",
        "",
        "## Check",
        "",
        *check_rows(checks),
    ]
    if shared:
        ps, checks_shared = shared
        lines += [
            "",
            "## Ranks sharing a GPU",
            "",
            f"Fitted on the same one-GPU record and {meta['shared'][0]} (2 ranks on {ps['gpus']} GPU): the ranks on a "
            f"GPU take turns, and an interface sum between them costs {1e3 * ps['sum_ms']:.0f} µs.",
            "",
            *check_rows(checks_shared),
        ]
    for title, rows in (("Strong scaling", strong), ("Weak scaling", weak)):
        lines += [
            "",
            f"## {title}",
            "",
            "| N | ranks | smoothing ms per level (elements per rank) | V-cycle ms | "
            + ("speed-up" if rows is strong else "efficiency")
            + " | first level no faster than on one GPU (share of the V-cycle "
            "from there) |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r["model"] is None:
                lines.append(f"| {r['n']} | {r['ranks']} | more ranks than slab units | | | |")
                continue
            m = r["model"]
            lv = "; ".join(
                f"{x['smoothing_ms']:.1f} ({x['per_rank']:,.0f}{'' if x['cut'] or r['ranks'] == 1 else '*'})"
                for x in m["levels"]
            )
            k = m["stops_scaling"]
            stop = (
                "–"
                if k is None
                else (
                    f"level {k}: {m['levels'][k]['per_rank']:,.0f} "
                    f"{'per rank' if m['levels'][k]['cut'] else 'whole'} ({100 * m['share_from_there']:.0f} %)"
                )
            )
            lines.append(f"| {r['n']} | {r['ranks']} | {lv} | {m['v_cycle_ms']:.1f} | {r['ratio']:.2f} | {stop} |")
    return "\n".join(lines) + "\n"


def read_records(option: str, paths: list) -> list:
    """profile_multigrid records read from ``paths``; InputError naming ``option`` for a file that is not one."""
    records = []
    for path in paths:
        try:
            with open(path) as fh:
                rec = json.load(fh)
            rec.setdefault("ranks", 1)
            rec["levels"], rec["n"], rec["cycle"]  # noqa: B018 - a profile_multigrid record
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"{option} {path}: cannot read a profile_multigrid record ({error!r})") from None
        records.append(rec)
    return records


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="python scripts/level_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--profiles", nargs="+", required=True, help="profile_multigrid records of one box on 1, 2 (and more) ranks"
    )
    ap.add_argument(
        "--shared",
        nargs="*",
        default=[],
        help="profile_multigrid records of the same box on 2 and more ranks "
        "sharing GPUs (--allow-shared-gpu), to check the model against",
    )
    ap.add_argument(
        "--n", type=int, nargs="+", default=[64, 112], help="boxes N^3 to predict strong scaling of (default 64 112)"
    )
    ap.add_argument(
        "--ranks", type=int, nargs="+", default=[8, 64, 512], help="rank counts to predict (default 8 64 512)"
    )
    ap.add_argument(
        "--weak", type=int, default=40, help="elements per side per rank of the weak-scaling boxes (default 40)"
    )
    ap.add_argument(
        "--reduction-us",
        type=float,
        default=17.0,
        help="a reduction on the profiled link, µs (default 17: NCCL allreduce of a few entries between two H200s)",
    )
    ap.add_argument(
        "--latency-us",
        type=float,
        default=0.0,
        help="added per message and reduction step in the predictions, µs "
        "(default 0: the profiled link; about 10 between nodes)",
    )
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu", help="suffix of the result files")
    args = ap.parse_args(argv)
    ranks = check_each("--ranks", args.ranks, 2, 1 << 20, integer=True)
    sizes = check_each("--n", args.n, 6, 10000, integer=True)
    check_each("--weak", [args.weak], 6, 10000, integer=True)
    check_each("--reduction-us", [args.reduction_us], 0, 1e6)
    check_each("--latency-us", [args.latency_us], 0, 1e6)
    check_tag(args.tag)
    records, shared = read_records("--profiles", args.profiles), read_records("--shared", args.shared)
    counts = sorted(r["ranks"] for r in records)
    if counts[:2] != [1, 2] or len(set(counts)) != len(counts) or len({r["n"] for r in records}) != 1:
        raise InputError(
            f"--profiles must be one box on 1 rank, 2 ranks and optionally more, each once (got ranks {counts})"
        )
    if any(sharing(r) > 1 for r in records):
        raise InputError("--profiles must have one GPU per rank; give records of ranks sharing a GPU with --shared")
    records.sort(key=lambda r: r["ranks"])
    p = fit(records[0], records[1], args.reduction_us * 1e-3, args.latency_us * 1e-3)
    checks = [check(r, p) for r in records if r["ranks"] > 2]
    shared_fit = None
    if shared:
        shared.sort(key=lambda r: r["ranks"])
        if (
            shared[0]["ranks"] != 2
            or len(shared) < 2
            or any(sharing(r) <= 1 for r in shared)
            or {r["n"] for r in shared} != {records[0]["n"]}
        ):
            raise InputError(
                "--shared must be the --profiles box on 2 ranks and on more, each with ranks sharing a GPU "
                "(profile_multigrid.py --allow-shared-gpu)"
            )
        ps = fit(records[0], shared[0], args.reduction_us * 1e-3, 0.0)
        shared_fit = (ps, [check(r, ps) for r in shared[1:]])
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
        weak.append(
            {"n": n, "ranks": q, "model": m, "ratio": base / m["v_cycle_ms"] * (n**3 / q) / args.weak**3 if m else None}
        )
    meta = {
        "command": "python scripts/level_model.py " + " ".join(argv),
        "device": records[0].get("device"),
        "profiles": [os.path.relpath(f, ROOT) for f in args.profiles],
        "shared": [os.path.relpath(f, ROOT) for f in args.shared],
    }
    text = markdown(meta, p, checks, strong, weak, shared_fit)
    params = lambda q: {k: v for k, v in q.items() if k != "t1"}  # noqa: E731
    write_record(
        os.path.join(args.results, f"level_model_{args.tag}"),
        {
            "meta": meta,
            "parameters": params(p),
            "checks": checks,
            "strong": strong,
            "weak": weak,
            "shared": None if shared_fit is None else {"parameters": params(shared_fit[0]), "checks": shared_fit[1]},
        },
        text,
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="level_model"))
