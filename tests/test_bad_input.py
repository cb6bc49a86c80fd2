"""Hostile input to every command (fem3d.cavity, fem3d.verify, the 2D commands): exit code 2 and
one line on stderr, no traceback and no warning before it, on one rank and on two (every rank
exits; the line is printed once). The inputs are in tests/hostile_inputs.py."""

import json
import os
import subprocess
import sys

import pytest

import hostile_inputs
from test_distributed import MPIEXEC, needs_mpiexec


def check(prog, argv, message, code, stderr):
    assert code == 2, (prog, argv, code, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog.split()[-1]}: error: ") and message in lines[0], (
        prog,
        argv,
        stderr,
    )


def test_at_least_25_hostile_inputs_each_one_line_exit_2(tmp_path):
    files = hostile_inputs.make_files(str(tmp_path))
    cases = hostile_inputs.cases(str(tmp_path), 1, files)
    assert len(cases) >= 25
    for prog, argv, message in cases:
        check(prog, argv, message, *hostile_inputs.run(prog, argv))
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "v.json")  # refused before writing


@needs_mpiexec
def test_the_same_inputs_on_two_ranks(tmp_path):
    p = subprocess.run(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            os.path.join(os.path.dirname(__file__), "hostile_inputs.py"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(p.stdout.strip().splitlines()[-1])
    cases = hostile_inputs.cases(str(tmp_path / "listing"), 2, hostile_inputs.make_files(str(tmp_path / "listing")))
    assert len(results) == len(cases) >= 26
    for (prog, argv, message), ((code0, err0), (code1, err1)) in zip(cases, results):
        check(prog, argv, message, code0, err0)
        assert code1 == 2 and err1 == "", (prog, argv, err1)  # every rank exits 2; only rank 0 prints


@needs_mpiexec
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bogus"], "fem3d.cavity: error: unrecognized arguments: --bogus"),
        (["--re", "inf"], "fem3d.cavity: error: --re must be > 0 and <= 100000 and finite (got inf)"),
        (["--n", "2000"], "fits at most"),
    ],
)
def test_as_a_user_starts_it_under_mpiexec(tmp_path, argv, message):
    p = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, "-m", "fem3d.cavity", "--device", "cpu", "--out", str(tmp_path), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and message in p.stderr, p.stderr
