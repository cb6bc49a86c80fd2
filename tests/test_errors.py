"""gpucfd.errors: range checks, the one-line command-line errors, warnings held back, ranks under MPI."""

import sys
import warnings

import numpy as np
import pytest

import gpucfd.errors
from gpucfd.errors import ArgumentParser, InputError, check_range, launcher_rank, run_cli
from test_distributed import mpiexec, needs_mpiexec


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(value=0.0, low=0, low_open=True), "--x must be > 0 (got 0.0)"),
        (dict(value=2.0, low=0, high=1, high_open=True), "--x must be >= 0 and < 1 (got 2.0)"),
        (dict(value=float("nan"), low=1e-3, high=1e5), "--x must be >= 0.001 and <= 100000 and finite (got nan)"),
        (dict(value=10**12, low=1, high=10**9, integer=True), "--x must be >= 1 and <= 1000000000 (got 1000000000000)"),
        (dict(value=2.5, low=1, integer=True), "--x must be an integer (got 2.5)"),
        (dict(value=float("-inf")), "--x must be finite (got -inf)"),
    ],
)
def test_check_range_names_the_range(kwargs, message):
    with pytest.raises(InputError) as info:
        check_range("--x", **kwargs)
    assert str(info.value) == message
    assert check_range("--x", 0.5, 0, 1, high_open=True) == 0.5


def test_warnings_before_an_error_are_dropped_and_kept_on_success(capsys):
    def main(argv):
        np.float32(3e38) * np.float32(10)  # RuntimeWarning: overflow
        if argv:
            raise InputError("--x must be finite")
        return 0

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert run_cli(main, ["bad"], prog="demo") == 2
    assert shown == [] and capsys.readouterr().err == "demo: error: --x must be finite\n"
    with pytest.warns(RuntimeWarning, match="overflow encountered"):
        assert run_cli(main, [], prog="demo") == 0


def test_memory_error_of_one_process_is_one_line(capsys):
    def main(argv):
        raise MemoryError("Unable to allocate 7.28 TiB for an array\nwith shape (1000000, 1000000)")

    assert run_cli(main, [], prog="demo") == 2
    assert capsys.readouterr().err == (
        "demo: error: out of memory (MemoryError: Unable to allocate 7.28 TiB for an array "
        "with shape (1000000, 1000000)); use a smaller problem\n"
    )


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"])
def test_argument_errors_print_on_rank_0_alone(monkeypatch, capsys, variable):
    ap = ArgumentParser(prog="demo")
    ap.add_argument("--n", type=int)
    for rank, printed in (("1", ""), ("0", "demo: error: argument --n: invalid int value: 'x'\n")):
        monkeypatch.setenv(variable, rank)
        assert launcher_rank() == int(rank)
        with pytest.raises(SystemExit) as exc:
            ap.parse_args(["--n", "x"])
        assert exc.value.code == 2 and capsys.readouterr().err == printed


def test_input_errors_without_a_communicator_print_on_launcher_rank_0(monkeypatch, capsys):
    def main(argv):
        raise InputError("--re must be > 0 (got 0.0)")

    monkeypatch.setattr(gpucfd.errors, "_COMMUNICATORS", [])  # no communicator made yet in this process
    for rank, printed in (("1", ""), ("0", "demo: error: --re must be > 0 (got 0.0)\n")):
        monkeypatch.setenv("PMI_RANK", rank)
        assert run_cli(main, [], prog="demo") == 2 and capsys.readouterr().err == printed


@needs_mpiexec
def test_argument_error_under_mpiexec_printed_once():
    p = mpiexec("-n", "2", sys.executable, "-m", "fem3d.cavity", "--bogus", timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr == "fem3d.cavity: error: unrecognized arguments: --bogus\n"
