"""Hostile input to the 2D commands and scripts: one line on stderr, exit code 2 (3 where the input is
valid but the run diverges), no traceback, no warning line before it, no hang.

Most inputs run in-process through gpucfd.errors.run_cli (they are refused before any work); a few
run as the user runs them, in a subprocess under a timeout.
"""

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest

import tridiag.cases.cavity2d_output
import tridiag.cases.memory
from gpucfd.errors import run_cli
from tridiag.cases import cavity2d, cylinder, heat

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")
CPU = ["--device", "cpu"]


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging: an alarm interrupts the block after ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line(capsys, main, argv, prog, code=2):
    """Run ``main(argv)`` through run_cli; return its single stderr line (asserting the exit code)."""
    with deadline(30):
        try:
            got = run_cli(main, argv, prog=prog)
        except SystemExit as exc:  # argparse
            got = exc.code
    err = capsys.readouterr().err
    assert got == code and err.count("\n") == 1 and "Traceback" not in err, (argv, got, err)
    return err.rstrip("\n")


HEAT = [
    (["unsteady", "--n", "1000000000"], "--n 1000000000 (float32) needs about"),
    (["unsteady", "--n", "17", "--dx", "1e-300"], "--dx must be >= 1e-30 and <= 1e+30 (got 1e-300)"),
    (["unsteady", "--n", "17", "--dt", "nan"], "--dt must be >= 1e-30 and <= 1e+30 and finite (got nan)"),
    (["unsteady", "--n", "16"], "decays by exp(-877), beyond float64's range (exp(-672))"),
    (["unsteady", "--n", "17", "--steps", "10000000000"], "--steps must be >= 0 and <= 1000000000"),
    (
        ["unsteady", "--n", "17", "--solver", "quantum"],
        "--solver must be one of auto, fused, thomas, pta, cr, cr_sorted, pcr, checkerboard, hybrid, tuned "
        "(got 'quantum')",
    ),
    (
        ["unsteady", "--n", "17", "--layout", "diagonal"],
        "--layout must be one of auto, natural, contiguous, interleaved",
    ),
    (
        ["unsteady", "--n", "17", "--steps", "3", "--solver", "checkerboard", "--dop", "0"],
        "--dop must be >= 1 and <= 17 (got 0)",
    ),
    (["steady", "--n", "9", "--t1", "0"], "--t1 must be >= 1e-06 and <= 1e+06 (got 0.0)"),
    (["steady", "--n", "9", "--t1", "inf"], "--t1 must be >= 1e-06 and <= 1e+06 and finite (got inf)"),
    (["steady", "--n", "9", "--tol", "1e300"], "--tol must be > 0 and < 1 (got 1e+300)"),
    (["steady", "--n", "9", "--maxiter", "0"], "--maxiter must be >= 1 and <= 1000000000 (got 0)"),
    (["steady", "--n", "9", "--inner-tol", "-1"], "--inner-tol must be > 0 and < 1 (got -1.0)"),
    (["steady", "--n", "nine"], "argument --n: invalid int value: 'nine'"),
]
CAVITY = [
    (["--n", "200000"], "--n 200000 (float64) needs about"),
    (["--re", "inf"], "--re must be >= 0.001 and <= 100000 and finite (got inf)"),
    (["--re", "1e300"], "--re must be >= 0.001 and <= 100000 (got 1e+300)"),
    (["--dt", "1e-300"], "--dt 1e-300 is too small to reach a steady state within --max-iterations 200000"),
    (["--dt", "1e300"], "--wall-relaxation (default Re h^2/dt = 2.44e-302 at dt 1e+300) is too small"),
    (["--tol", "1e300"], "--tol must be >= 2.22045e-16 and < 1 (got 1e+300)"),
    (["--iterations", "10000000000000"], "--iterations must be >= 0 and <= 1000000000"),
    (["--psi-sweeps", "1000000000000"], "--psi-sweeps must be >= 1 and <= 1000"),
    (["--check-every", "0"], "--check-every must be >= 1 and <= 1000000000 (got 0)"),
    (["--wall-relaxation", "nan"], "--wall-relaxation must be > 0 and <= 1 and finite (got nan)"),
    (
        ["--solver", "magic"],
        "--solver must be one of auto, fused, thomas, pta, cr, cr_sorted, pcr, checkerboard, hybrid, tuned "
        "(got 'magic')",
    ),
    (
        ["--solver", "checkerboard"],
        "--solver checkerboard is an iterative line solver, offered by the ADI heat cases only",
    ),
    (["--solver", "fused", "--layout", "natural"], "--layout applies to the library solvers"),
    (["--dtype", "float16"], "--dtype must be one of float64, float32 (got 'float16')"),
    (["--n", "4.5"], "argument --n: invalid int value: '4.5'"),
]
CYLINDER = [
    (["--grid", "99999999x99999999"], "--grid 99999999x99999999 (float64) needs about"),
    (["--re", "inf"], "--re must be >= 0.001 and <= 100000 and finite (got inf)"),
    (["--grid", "16x50", "--dt", "1e-300"], "--t-end 150 at dt 1e-300 takes 1.5e+302 steps, more than 1e+09"),
    (["--grid", "16x50", "--t-end", "1e300"], "--t-end 1e+300 at dt 0.25 takes 4e+300 steps"),
    (["--grid", "16x50", "--cfl", "6"], "--cfl must be > 0 and <= 5 (got 6.0)"),
    (["--grid", "16x50", "--kick", "1e300"], "--kick must be >= 0 and <= 100 (got 1e+300)"),
    (["--grid", "16x50", "--steady", "--tol", "2"], "--tol must be >= 2.22045e-16 and < 1 (got 2.0)"),
    (["--grid", "16x50", "--probe", "nan,4"], "--probe X must be >= 0 and <= 50 and finite (got nan)"),
    (["--grid", "16x50", "--t-end", "1", "--snapshots", "1000000000"], "--snapshots must be <= the number of steps, 4"),
    (["--grid", "16x50", "--psi-sweeps", "100000000000"], "--psi-sweeps must be >= 1 and <= 1000"),
    (["--grid", "16x50", "--body", "rubber"], "--body must be one of fixed, pressure (got 'rubber')"),
    (["--grid", "1e3x50"], "--grid must look like 160x800 (ny x nx cells; got '1e3x50')"),
]


@pytest.mark.parametrize(
    "main, prog, cases",
    [
        (heat.main, "tridiag.cases.heat", HEAT),
        (cavity2d.main, "tridiag.cases.cavity2d", CAVITY),
        (cylinder.main, "tridiag.cases.cylinder", CYLINDER),
    ],
    ids=["heat", "cavity2d", "cylinder"],
)
def test_hostile_options_one_line_exit_2(tmp_path, capsys, main, prog, cases):
    for argv, message in cases:
        line = one_line(capsys, main, [*argv, *CPU, "--out", str(tmp_path / "out")], prog)
        assert message in line, (argv, line)
    assert not (tmp_path / "out").exists()  # refused before the output folder was made


def test_memory_estimate_names_the_largest_grid_that_fits(tmp_path, capsys, monkeypatch):
    """1 GiB free: the cavity needs (56 float64 + 10 float64) arrays per node: 2**30 / 528 nodes, n = 1425."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 2**30)
    line = one_line(capsys, cavity2d.main, ["--n", "2048", *CPU, "--out", str(tmp_path)], "tridiag.cases.cavity2d")
    assert line == (
        "tridiag.cases.cavity2d: error: --n 2048 (float64) needs about 2.06 GiB of host memory, 1 GiB is free: "
        "--n 1425 fits at most"
    )
    line = one_line(
        capsys, cylinder.main, ["--grid", "1600x8000", *CPU, "--out", str(tmp_path)], "tridiag.cases.cylinder"
    )
    assert line.endswith("needs about 6.3 GiB of host memory, 1 GiB is free: --grid 636x3180 fits at most")


def test_divergence_is_exit_3_with_the_reason(tmp_path, capsys):
    line = one_line(
        capsys,
        cavity2d.main,
        ["--n", "16", "--re", "5000", "--dt", "20", "--check-every", "10", *CPU, "--out", str(tmp_path), "--no-plots"],
        "tridiag.cases.cavity2d",
        code=3,
    )
    assert line.startswith("tridiag.cases.cavity2d: not converged (diverged): diverged at step ")
    assert "Δt = 20" in line and "use Δt <= 0.125" in line
    assert json.loads((tmp_path / "summary.json").read_text())["reason"] == "diverged"


def test_a_failing_picture_is_a_warning_and_the_results_stand(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no display\nat all")

    monkeypatch.setattr(tridiag.cases.cavity2d_output, "fields_png", broken)
    with deadline(60):
        code = run_cli(
            cavity2d.main,
            ["--n", "8", "--iterations", "20", "--solver", "thomas", *CPU, "--quiet", "--out", str(tmp_path)],
            prog="tridiag.cases.cavity2d",
        )
    assert code == 0
    assert (
        capsys.readouterr().err
        == "tridiag.cases.cavity2d: warning: fields.png not drawn (RuntimeError: no display at all)\n"
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["files"] == ["summary.json", "profiles.csv", "cavity2d.vtu", "profiles.png"]
    assert sorted(os.listdir(tmp_path)) == ["cavity2d.vtu", "profiles.csv", "profiles.png", "summary.json"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["-m", "tridiag.cases.heat", "unsteady", "--dx", "1e-300", "--n", "9", *CPU],
            2,
            "tridiag.cases.heat: error: --dx must be >= 1e-30 and <= 1e+30 (got 1e-300)",
        ),
        (
            ["-m", "tridiag.cases.cavity2d", "--n", "200000", *CPU],
            2,
            "tridiag.cases.cavity2d: error: --n 200000 (float64) needs about",
        ),
        (
            ["-m", "tridiag.cases.cylinder", "--re", "inf", *CPU],
            2,
            "tridiag.cases.cylinder: error: --re must be >= 0.001 and <= 100000 and finite (got inf)",
        ),
        (
            ["-m", "tridiag.cases.cylinder", "--grid", "16x50", "--dt", "50", *CPU],
            3,
            "tridiag.cases.cylinder: not converged (CFL): time step too large for the convective CFL condition "
            "at step 0",
        ),
        (
            [os.path.join(SCRIPTS, "heat_steady_table.py")],
            2,
            "scripts/heat_steady_table.py: error: --device gpu requested but no CUDA GPU is usable",
        ),
        ([os.path.join(SCRIPTS, "heat_steady_table.py"), "--sizes", "4", *CPU], 2, "--sizes must be >= 8 (got 4)"),
        (
            [os.path.join(SCRIPTS, "bench_tridiag.py")],
            2,
            "scripts/bench_tridiag.py: error: this benchmark needs a CUDA GPU",
        ),
        (
            [os.path.join(SCRIPTS, "bench_tridiag.py"), "--dtypes", "float16"],
            2,
            "--dtypes must be one of float64, float32 (got 'float16')",
        ),
    ],
    ids=[
        "heat dx",
        "cavity2d memory",
        "cylinder Re",
        "cylinder CFL",
        "heat table no GPU",
        "heat table sizes",
        "bench_tridiag no GPU",
        "bench_tridiag dtypes",
    ],
)
def test_commands_as_the_user_runs_them(tmp_path, args, code, message):
    if "no GPU" in message or "CUDA GPU" in message:
        from gpucfd.backend import cupy_module

        if cupy_module() is not None:
            pytest.skip("a GPU is present")
    p = subprocess.run(
        [sys.executable, *args, *(["--out", str(tmp_path / "o")] if "-m" in args else [])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == code, p.stderr
    assert len(p.stderr.splitlines()) == 1 and message in p.stderr and "Traceback" not in p.stderr, p.stderr
