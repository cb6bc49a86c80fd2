"""scripts/bench_parallel.py on the CPU at toy sizes under the venv's mpiexec: a row per study
and rank count with what the run measured, the speed-ups and efficiencies computed from
them, and the saved table; bad options exit 2 with one line."""

import json
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside this Python")
def test_rows_ratios_and_table(tmp_path):
    cmd = [
        sys.executable,
        os.path.join(SCRIPTS, "bench_parallel.py"),
        "--ranks",
        "1",
        "2",
        "--strong",
        "4",
        "--weak",
        "3",
        "--device",
        "cpu",
        "--re",
        "100",
        "--grading",
        "0",
        "--launcher",
        MPIEXEC,
        "--results",
        str(tmp_path),
        "--tag",
        "t",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rows = json.loads((tmp_path / "parallel_t.json").read_text())["rows"]
    assert [(r["study"], r["ranks"], r["elements"]) for r in rows] == [
        ("strong", 1, 64),
        ("strong", 2, 64),
        ("weak", 1, 27),
        ("weak", 2, 64),
    ]  # 3 * 2^(1/3) rounds to 4
    assert all(r["converged"] for r in rows) and [r["communicator"] for r in rows] == ["serial", "mpi"] * 2
    one, two = rows[0], rows[1]
    assert (one["newton_steps"], one["linear_iterations"]) == (two["newton_steps"], two["linear_iterations"])
    assert two["speed_up"] == pytest.approx(one["wall_s"] / two["wall_s"]) and two["efficiency"] == pytest.approx(
        two["speed_up"] / 2
    )
    weak = rows[3]
    assert weak["efficiency"] == pytest.approx(rows[2]["wall_s"] / weak["wall_s"] * (64 / 2) / 27)
    assert two["partition"]["imbalance"] == 1.0 and one["partition"] is None
    assert (
        all(t["exchanges"] > 0 and t["message_bytes"] > 0 for t in two["traffic"])
        and one["traffic"][0]["messages"] == 0
    )
    assert two["summary"]["dofs"] == two["unknowns"] == 3 * 9**3 + 5**3 and two["summary"]["wall_s"] <= two["wall_s"]
    md = (tmp_path / "parallel_t.md").read_text()
    assert (
        f"| strong | 4^3 | 2 | 64 | {two['unknowns']:,} | {two['newton_steps']} |" in md
        and "| weak | 3^3 per rank | 2 | 64 |" in md
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ranks", "0"], "--ranks must be >= 1"),
        (["--strong", "1"], "--strong must be >= 2"),
        (["--strong"], "nothing to run"),
        (["--tag", "a/b"], "--tag may hold"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path, args, message):
    p = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, "bench_parallel.py"), *args, "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and message in p.stderr
    assert not list(tmp_path.iterdir())
