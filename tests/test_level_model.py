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


def record(ranks, smoothing, v_cycle, gpus=None):
    levels = [
        {"elements": 4096 // ranks, "smoothing_ms": smoothing[0]},
        {"elements": 512 // ranks, "smoothing_ms": smoothing[1]},
    ]
    for lv in levels:
        lv.update(
            partitioned=ranks > 1,
            sums_per_smoothing=16 if ranks > 1 else 0,
            reductions_per_smoothing=25 if ranks > 1 else 0,
        )
    return {
        "n": 16,
        "ranks": ranks,
        "gpus": gpus or ranks,
        "device": "test",
        "levels": levels,
        "cycle": {"v_cycle_ms": v_cycle},
    }


def write(tmp_path, records, stem="p"):
    paths = []
    for k, r in enumerate(records):
        paths.append(str(tmp_path / f"{stem}{k}.json"))
        with open(paths[-1], "w") as fh:
            fh.write(r if isinstance(r, str) else json.dumps(r))
    return paths


def run(tmp_path, records, *extra):
    return subprocess.run(
        [
            sys.executable,
            os.path.join(SCRIPTS, "level_model.py"),
            "--profiles",
            *write(tmp_path, records),
            "--n",
            "16",
            "--ranks",
            "8",
            "64",
            "--weak",
            "8",
            "--results",
            str(tmp_path),
            "--tag",
            "t",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


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


def test_ranks_sharing_a_gpu_take_turns(tmp_path):
    """--shared: 2 and 4 ranks on one GPU; a cut level costs g * t1(elements per rank) plus the
    sums, whose cost is fitted on the shared 2-rank record (0.3 ms here) apart from the one-GPU-
    per-rank fit (0.1 ms)."""
    shared_extra = 16 * 0.3 + 25 * 0.017
    two = [t1(2048) + EXTRA, t1(256) + EXTRA]
    two_shared = [2 * t1(2048) + shared_extra, 2 * t1(256) + shared_extra]
    four_shared = [4 * t1(1024) + shared_extra, 4 * t1(128) + shared_extra]
    records = [record(1, [20.0, 4.0], 50.0), record(2, two, 2 * sum(two) + 3.0)]
    shared = write(
        tmp_path,
        [
            record(2, two_shared, 2 * sum(two_shared) + 6.0, gpus=1),
            record(4, four_shared, 2 * sum(four_shared) + 6.0, gpus=1),
        ],
        "s",
    )
    p = run(tmp_path, records, "--shared", *shared)
    assert p.returncode == 0, p.stderr
    out = json.loads((tmp_path / "level_model_t.json").read_text())
    assert out["parameters"]["sum_ms"] == pytest.approx(0.1) and out["shared"]["parameters"]["sum_ms"] == pytest.approx(
        0.3
    )
    (check,) = out["shared"]["checks"]
    assert check["gpus"] == 1 and [lv["model_ms"] for lv in check["levels"]] == pytest.approx(four_shared)
    assert check["v_cycle_model_ms"] == pytest.approx(
        check["v_cycle_measured_ms"]
    )  # the same work per GPU: the same rest
    assert "## Ranks sharing a GPU" in (tmp_path / "level_model_t.md").read_text()
    bad = run(tmp_path, records, "--shared", shared[1])  # no 2-rank shared record to fit on
    assert bad.returncode == 2 and "--shared must be" in bad.stderr


@pytest.mark.parametrize(
    "records, message",
    [
        (["{"], "cannot read a profile_multigrid record"),
        ([record(1, [20.0, 4.0], 50.0), record(4, [8.0, 6.5], 31.0)], "must be one box on 1 rank, 2 ranks"),
        ([record(1, [20.0, 4.0], 50.0), record(2, [12.0, 5.0], 40.0, gpus=1)], "--profiles must have one GPU per rank"),
    ],
)
def test_bad_profiles_exit_2_with_one_line(tmp_path, records, message):
    p = run(tmp_path, records)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and message in p.stderr, p.stderr
