"""A two-point scaling model of the default solver's time to solution, fed by a bench_parallel record.

    python scripts/scaling_model.py --record benchmarks/results/parallel_h200x4.json --ranks 8 64 512 --tag h200x4

For each strong-scaling case and the DFG case of the record (scripts/bench_parallel.py) run on
1 and 2 ranks, the process wall time T(P) is split, from the runs' summary.json, into the
Newton steps on the finest mesh, F(P), and the rest, R(P): process start, data preparation
(MPI, CUDA and NCCL start-up, the whole mesh built on every rank), the coarser meshes of mesh
sequencing (solved whole on every rank up to REDUNDANT_MAX elements) and output. From the
1- and 2-rank runs alone:

    F(P) = F_alike + F_split / P    F_alike = 2 F(2) - F(1) (at least 0): the work every rank
                                    does alike (the replicated coarse multigrid levels, kernel
                                    launches), F_split = F(1) - F_alike
    R(P) = R(2) for P >= 2          start-up and set-up that do not shrink with the ranks
    C(P) = X (a - a_2) + Y (a log2 P - a_2)   the exchanges X and reductions Y of the 2-rank
                                    run (its busiest rank's traffic) at a latency a per
                                    message (--latency-us) beyond the a_2 the 2-rank run paid
                                    (--latency-2-us)

T(P) = F(P) + R(P) + C(P) is checked against every other measured rank count of the record
and predicted for --ranks; a box cut in slabs takes at most as many ranks as it has element
layers along its longest side (the row says so beyond). Saves
benchmarks/results/scaling_model_<tag>.{json,md}.
"""

from __future__ import annotations

import json
import math
import os
import sys

from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import write_record
from script_options import check_each, check_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fine_seconds(summary: dict) -> float:
    """Seconds of the Newton steps on the finest mesh (its continuation stages)."""
    return sum(st["seconds"] for stage in summary["continuation"] for st in stage["steps"])


def busiest(row: dict) -> dict:
    """The traffic of the rank that sent the most bytes."""
    return max(row["traffic"], key=lambda t: t["message_bytes"])


def fit(one: dict, two: dict) -> dict:
    """The model's terms from the 1- and 2-rank rows of a case."""
    f1, f2 = fine_seconds(one["summary"]), fine_seconds(two["summary"])
    alike = max(0.0, 2 * f2 - f1)
    traffic = busiest(two)
    return {
        "fine_1": f1,
        "fine_2": f2,
        "fine_alike": alike,
        "fine_split": f1 - alike,
        "rest_1": one["wall_s"] - f1,
        "rest_2": two["wall_s"] - f2,
        "exchanges": traffic["exchanges"],
        "reductions": traffic["reductions"],
    }


def predict(terms: dict, ranks: int, latency: float, latency_2: float) -> float:
    """T(P) in seconds (``latency`` and ``latency_2`` in seconds)."""
    if ranks == 1:
        return terms["fine_1"] + terms["rest_1"]
    comm = terms["exchanges"] * (latency - latency_2) + terms["reductions"] * (latency * math.log2(ranks) - latency_2)
    return terms["fine_alike"] + terms["fine_split"] / ranks + terms["rest_2"] + max(0.0, comm)


def slab_limit(row: dict) -> int | None:
    """Most ranks a box of the row's cavity takes (element layers along its longest side), None for other meshes."""
    box = row["summary"].get("mesh", {}).get("box")
    return max(box) if box else None


def model(record: dict, ranks: list, latency: float, latency_2: float) -> list:
    """Per case: its terms, the check against each measured rank count, and the predictions."""
    out = []
    for study, case in dict.fromkeys((r["study"], r["case"]) for r in record["rows"] if "error" not in r):
        if study == "weak":
            continue
        rows = {r["ranks"]: r for r in record["rows"] if (r["study"], r["case"]) == (study, case) and "error" not in r}
        if 1 not in rows or 2 not in rows:
            continue
        terms = fit(rows[1], rows[2])
        t1 = rows[1]["wall_s"]
        modelled = {p: predict(terms, p, latency, latency_2) for p in [*rows, *ranks]}
        checks = [
            {"ranks": p, "measured_s": r["wall_s"], "model_s": modelled[p], "error": modelled[p] / r["wall_s"] - 1}
            for p, r in sorted(rows.items())
            if p > 2
        ]
        limit = slab_limit(rows[1])
        predictions = [
            {
                "ranks": p,
                "model_s": modelled[p],
                "speed_up": t1 / modelled[p],
                "fits_slabs": limit is None or p <= limit,
            }
            for p in ranks
        ]
        out.append(
            {
                "study": study,
                "case": case,
                "elements": rows[1]["elements"],
                "wall_1_s": t1,
                "terms": terms,
                "checks": checks,
                "predictions": predictions,
                "speed_up_limit": t1 / (terms["fine_alike"] + terms["rest_2"]),
            }
        )
    return out


def markdown(meta: dict, cases: list) -> str:
    lines = [
        f"# Scaling model of the default solver ({meta['device']})",
        "",
        f"`{meta['command']}`",
        "",
        f"Fitted on the 1- and 2-rank runs of `{meta['record']}`; latency {meta['latency_us']:g} µs per message "
        f"and reduction step beyond the 2-rank runs' {meta['latency_2_us']:g} µs. F: the finest mesh's Newton steps, "
        "R: the rest (start, data preparation, coarser meshes, output).",
        "",
        "| case | elements | 1 rank s | F alike s | F split s | R (P ≥ 2) s | exchanges, reductions "
        "| measured / model | most speed-up |" + "".join(f" {p} ranks s (speed-up) |" for p in meta["ranks"]),
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(meta["ranks"]),
    ]
    for c in cases:
        t = c["terms"]
        checks = (
            ", ".join(
                f"{k['ranks']}: {k['measured_s']:.1f} / {k['model_s']:.1f} s ({100 * k['error']:+.0f} %)"
                for k in c["checks"]
            )
            or "–"
        )
        preds = "".join(
            f" {p['model_s']:.1f} ({p['speed_up']:.2f}×) |" if p["fits_slabs"] else " more ranks than slabs |"
            for p in c["predictions"]
        )
        lines.append(
            f"| {c['study']} {c['case']} | {c['elements']:,} | {c['wall_1_s']:.1f} | {t['fine_alike']:.2f} | "
            f"{t['fine_split']:.2f} | {t['rest_2']:.1f} | {t['exchanges']:,}, {t['reductions']:,} | {checks} | "
            f"{c['speed_up_limit']:.2f}× |{preds}"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="python scripts/scaling_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", required=True, help="a bench_parallel record (benchmarks/results/parallel_<tag>.json)")
    ap.add_argument(
        "--ranks", type=int, nargs="+", default=[8, 64, 512], help="rank counts to predict (default 8 64 512)"
    )
    ap.add_argument(
        "--latency-us",
        type=float,
        default=10.0,
        help="latency per message and reduction step on the predicted machines, µs "
        "(default 10: InfiniBand between nodes)",
    )
    ap.add_argument(
        "--latency-2-us", type=float, default=3.0, help="the same on the 2-rank runs' link, µs (default 3: NVLink)"
    )
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--tag", default="gpu", help="suffix of the result files")
    args = ap.parse_args(argv)
    ranks = check_each("--ranks", args.ranks, 2, None, integer=True)
    check_each("--latency-us", [args.latency_us], 0, 1e6)
    check_each("--latency-2-us", [args.latency_2_us], 0, 1e6)
    check_tag(args.tag)
    try:
        with open(args.record) as fh:
            record = json.load(fh)
    except (OSError, ValueError) as error:
        raise InputError(f"--record {args.record}: cannot read a bench_parallel record ({error})") from None
    cases = model(record, ranks, args.latency_us * 1e-6, args.latency_2_us * 1e-6)
    if not cases:
        raise InputError(f"--record {args.record} has no case run on 1 and 2 ranks")
    meta = {
        "command": "python scripts/scaling_model.py " + " ".join(argv),
        "record": os.path.relpath(args.record, ROOT),
        "device": record["meta"].get("device"),
        "ranks": ranks,
        "latency_us": args.latency_us,
        "latency_2_us": args.latency_2_us,
    }
    text = markdown(meta, cases)
    write_record(os.path.join(args.results, f"scaling_model_{args.tag}"), {"meta": meta, "cases": cases}, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="scaling_model"))
