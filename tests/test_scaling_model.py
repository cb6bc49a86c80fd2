"""scripts/scaling_model.py on a fabricated bench_parallel record: the two-point terms, the
check against the 4-rank run, the predictions and the slab limit; bad records exit 2."""

import json
import math
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def row(study, ranks, wall, fine_steps, box=(16, 16, 16), exchanges=100, reductions=200):
    summary = {"continuation": [{"steps": [{"seconds": s} for s in fine_steps]}], "mesh": {"box": list(box)}}
    return {
        "study": study,
        "case": "16^3",
        "ranks": ranks,
        "elements": 4096,
        "wall_s": wall,
        "summary": summary,
        "traffic": [{"exchanges": exchanges, "reductions": reductions, "message_bytes": 10 * q} for q in range(ranks)],
    }


def test_terms_checks_and_predictions(tmp_path):
    # F(1) = 6, F(2) = 4: alike 2, split 4; R(1) = 4, R(2) = 5
    record = {
        "meta": {"device": "test"},
        "rows": [
            row("strong", 1, 10.0, [4.0, 2.0]),
            row("strong", 2, 9.0, [3.0, 1.0]),
            row("strong", 4, 8.5, [2.5, 0.5]),
            row("weak", 1, 3.0, [1.0]),
        ],
    }
    path = tmp_path / "parallel_t.json"
    path.write_text(json.dumps(record))
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(SCRIPTS, "scaling_model.py"),
            "--record",
            str(path),
            "--ranks",
            "8",
            "32",
            "--latency-us",
            "10",
            "--latency-2-us",
            "3",
            "--results",
            str(tmp_path),
            "--tag",
            "t",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    cases = json.loads((tmp_path / "scaling_model_t.json").read_text())["cases"]
    assert len(cases) == 1  # the weak study is not modelled
    c = cases[0]
    assert c["terms"] == {
        "fine_1": 6.0,
        "fine_2": 4.0,
        "fine_alike": 2.0,
        "fine_split": 4.0,
        "rest_1": 4.0,
        "rest_2": 5.0,
        "exchanges": 100,
        "reductions": 200,
    }
    comm = lambda p: 100 * 7e-6 + 200 * (10e-6 * math.log2(p) - 3e-6)  # noqa: E731
    assert c["checks"] == [
        pytest.approx({"ranks": 4, "measured_s": 8.5, "model_s": 2 + 1 + 5 + comm(4), "error": (8 + comm(4)) / 8.5 - 1})
    ]
    assert [q["model_s"] for q in c["predictions"]] == pytest.approx([2 + 0.5 + 5 + comm(8), 2 + 0.125 + 5 + comm(32)])
    assert [q["fits_slabs"] for q in c["predictions"]] == [True, False]  # 16 layers: at most 16 slabs
    assert c["speed_up_limit"] == pytest.approx(10 / 7)
    md = (tmp_path / "scaling_model_t.md").read_text()
    assert "| strong 16^3 | 4,096 | 10.0 | 2.00 | 4.00 | 5.0 | 100, 200 | 4: 8.5 / 8.0 s (-6 %) | 1.43× |" in md
    assert md.rstrip().endswith("| more ranks than slabs |")


@pytest.mark.parametrize(
    "content, message",
    [("{", "cannot read a bench_parallel record"), ('{"meta": {}, "rows": []}', "has no case run on 1 and 2 ranks")],
)
def test_bad_records_exit_2_with_one_line(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_text(content)
    p = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "scaling_model.py"), "--record", str(path), "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and message in p.stderr
