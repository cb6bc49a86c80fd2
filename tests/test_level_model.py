"""scripts/level_model.py on fabricated profile_multigrid records of a 16^3 box (smoothed
levels 16^3 and 8^3): the one-GPU curve, the cost of an interface sum fitted on 2 ranks, the
check against 4 ranks, the predictions with fem3d's cut and replicated levels; bad records
exit 2."""
import json
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
EXTRA = 16 * 0.1 + 25 * 0.017  # ms: 16 interface sums of 0.1 ms and 25 reductions of 17 us per smoothing of a cut level


def t1(elements):  # the one-GPU record below: 4 ms at 512 elements, 20 ms at 4096, linear between, 4 ms below
    return max(4.0, 4.0 + (elements - 512) * 16 / 3584)


def record(ranks, smoothing, v_cycle):
    levels = [{"elements": 4096 // ranks, "smoothing_ms": smoothing[0]}, {"elements": 512 // ranks, "smoothing_ms": smoothing[1]}]
    for lv in levels:
        lv.update(partitioned=ranks > 1, sums_per_smoothing=16 if ranks > 1 else 0, reductions_per_smoothing=25 if ranks > 1 else 0)
    return {"n": 16, "ranks": ranks, "device": "test", "levels": levels, "cycle": {"v_cycle_ms": v_cycle}}


def run(tmp_path, records, *extra):
    paths = []
    for k, r in enumerate(records):
        paths.append(str(tmp_path / f"p{k}.json"))
        with open(paths[-1], "w") as fh:
            fh.write(r if isinstance(r, str) else json.dumps(r))
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, "level_model.py"), "--profiles", *paths, "--n", "16",
                           "--ranks", "8", "64", "--weak", "8", "--results", str(tmp_path), "--tag", "t", *extra],
                          capture_output=True, text=True, timeout=120)


def test_fit_check_and_predictions(tmp_path):
    two = [t1(2048) + EXTRA, t1(256) + EXTRA]
    records = [record(1, [20.0, 4.0], 50.0), record(2, two, 2 * sum(two) + 3.0), record(4, [8.0, 6.5], 31.0)]
    p = run(tmp_path, records)
    assert p.returncode == 0, p.stderr
    out = json.loads((tmp_path / "level_model_t.json").read_text())
    assert out["parameters"]["sum_ms"] == pytest.approx(0.1) and out["parameters"]["rest_ms"] == pytest.approx(3.0)
    (check,) = out["checks"]  # 4 ranks: both smoothed levels cut (8^3 keeps 2 layers per rank)
    assert [lv["model_ms"] for lv in check["levels"]] == pytest.approx([t1(1024) + EXTRA, t1(128) + EXTRA])
    assert check["v_cycle_model_ms"] == pytest.approx(2 * (t1(1024) + t1(128) + 2 * EXTRA) + 3.0 * 1024 / 2048)
    by_ranks = {r["ranks"]: r["model"] for r in out["strong"]}
    eight = by_ranks[8]  # 8 ranks: 8^3 no longer keeps 2 layers per rank, so every rank holds it whole
    assert [(lv["per_rank"], lv["cut"]) for lv in eight["levels"]] == [(512, True), (512, False)]
    assert eight["v_cycle_ms"] == pytest.approx(2 * (t1(512) + EXTRA + t1(512)) + 3.0 * 512 / 2048)
    assert eight["stops_scaling"] == 1  # the whole 8^3 level: no faster than on one GPU
    assert by_ranks[64] is None  # 16 slabs at most
    md = (tmp_path / "level_model_t.md").read_text()
    assert "| 16 | 64 | more ranks than slab units |" in md and "an interface sum costs 100 µs" in md


@pytest.mark.parametrize("records, message", [
    (["{"], "cannot read a profile_multigrid record"),
    ([record(1, [20.0, 4.0], 50.0), record(4, [8.0, 6.5], 31.0)], "must be one box on 1 rank, 2 ranks"),
])
def test_bad_profiles_exit_2_with_one_line(tmp_path, records, message):
    p = run(tmp_path, records)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and message in p.stderr, p.stderr
