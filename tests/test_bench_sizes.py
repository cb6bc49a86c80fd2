"""scripts/bench_sizes.py on the CPU at toy sizes: a row per N with what the run measured,
the ratios computed from them, and the saved table and plot."""

import json
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def test_rows_ratios_table_and_plot(tmp_path):
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "bench_sizes.py"),
        "--device",
        "cpu",
        "--n",
        "3",
        "4",
        "--re",
        "100",
        "--grading",
        "0",
        "--runs",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = json.loads((tmp_path / "bench_sizes_t.json").read_text())["rows"]
    assert [r["n"] for r in rows] == [3, 4] and all(r["converged"] for r in rows)
    assert [r["solver"] for r in rows] == ["mg", "mg"]  # 3^3 solved directly, 4^3 by two levels
    assert [r["unknowns"] for r in rows] == [3 * 7**3 + 4**3, 3 * 9**3 + 5**3]
    for r in rows:
        assert r["s_per_m_unknowns"] == pytest.approx(r["wall_s"] / (r["unknowns"] / 1e6))
        assert 0 < r["setup_share"] < 1
    ratios = sorted(r["per_element_vs_median"] for r in rows)  # the median of two is their mean
    assert ratios[0] < 1 < ratios[1] and ratios[0] + ratios[1] == pytest.approx(2.0)
    md = (tmp_path / "bench_sizes_t.md").read_text()
    assert all(
        r["sequence"] == [] for r in rows
    )  # no coarser mesh of SEQUENCE_MIN elements: the coarser-meshes column empty
    assert f"| 4 | {rows[1]['unknowns']:,} | mg |  | {rows[1]['newton_steps']} |" in md
    assert (tmp_path / "bench_sizes_t.png").stat().st_size > 5000
    assert os.path.isdir(tmp_path / "runs" / "warmup")
    for r in rows:  # each run's summary in its row; no device memory on the CPU
        assert r["summary"]["dofs"] == r["unknowns"] and r["summary"]["wall_s"] <= r["wall_s"]
        assert r["kb_per_element"] is None and r["cold_wall_s"] is None and r["cold_summary"] is None
    add = cmd[:5] + ["2"] + cmd[7:] + ["--add", "--cold"]  # a second sitting: N = 2 joins the record, run cold first
    p = subprocess.run(add, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    record = json.loads((tmp_path / "bench_sizes_t.json").read_text())
    assert [r["n"] for r in record["rows"]] == [2, 3, 4] and len(record["commands"]) == 2
    assert [r["wall_s"] for r in record["rows"][1:]] == [r["wall_s"] for r in rows]
    assert sorted(r["per_element_vs_median"] for r in record["rows"])[1] == pytest.approx(1.0)
    assert record["rows"][0]["cold_wall_s"] > 0 and record["rows"][0]["cold_summary"]["command"].endswith("_cold")
    two = record["rows"][0]
    assert (
        f"| {two['wall_s']:.1f} | {two['cold_wall_s']:.1f} | {two['s_per_m_unknowns']:.1f} |"
        in (tmp_path / "bench_sizes_t.md").read_text()
    )


def test_add_without_a_record(tmp_path):
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "bench_sizes.py"),
        "--device",
        "cpu",
        "--n",
        "3",
        "--results",
        str(tmp_path),
        "--tag",
        "none",
        "--add",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--add: no saved record" in p.stderr
    assert not os.listdir(tmp_path)


def test_device_mib_out_of_range_is_an_input_error(tmp_path):
    """--device-mib below 1024 stops before any run, naming the option."""
    cmd = [sys.executable, os.path.join(SCRIPTS, "bench_sizes.py"), "--n", "3", "--tag", "t", "--device-mib", "10"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "--device-mib" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.gpu
def test_hold_beyond_leaves_a_smaller_gpus_memory():
    """timed_runs.hold_beyond(m): the GPU then has m MiB in all for this process's work (its
    free memory falls by what it holds, to within the allocation's rounding)."""
    from gpucfd.backend import cupy_module

    cupy = cupy_module()
    if cupy is None:
        pytest.skip("no CUDA GPU")
    sys.path.insert(0, SCRIPTS)
    from timed_runs import hold_beyond

    free, total = cupy.cuda.runtime.memGetInfo()
    mib = (total - free) // 2**20 + 2048  # 2 GiB beyond what is in use now
    held = hold_beyond(mib)
    try:
        left = cupy.cuda.runtime.memGetInfo()[0]
        assert abs(left - (mib * 2**20 - (total - free))) < 64 * 2**20
    finally:
        cupy.cuda.runtime.free(held)
