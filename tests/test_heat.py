"""Heat conduction on the batched tridiagonal solvers: tridiag.cases.adi, tridiag.cases.heat (CLI)."""
import functools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import tridiag
from gpucfd.errors import ConvergenceError
from tridiag.cases.adi import ADI, SWEEPS
from tridiag.cases.heat import main
from tridiag.cases.heat_exact import steady_series
from tridiag.cases.heat_steady import parameters, solve_steady
from tridiag.cases.heat_unsteady import initial_field, relative_l2, run_unsteady, serial_cpu_run
from tridiag.kernels.adi_rhs import adi_pass, adi_pass_numpy

DIRECT = [m for m in tridiag.METHODS if m not in ("auto", "checkerboard")]
PASSES = [(lap, acc, tr) for lap in (True, False) for acc in (False, True) for tr in (False, True)]


def _pass_naive(src, out, coef, laplacian, accumulate, transpose):
    rows, cols = src.shape
    value = np.array(src, np.float64)
    if laplacian:
        value[:] = 0
        for j in range(1, rows - 1):
            for i in range(1, cols - 1):
                value[j, i] = coef * (src[j - 1, i] + src[j + 1, i] + src[j, i - 1] + src[j, i + 1] - 4 * src[j, i])
    value = value.T if transpose else value
    return out + value if accumulate else value


@pytest.mark.parametrize("laplacian, accumulate, transpose", PASSES)
def test_adi_pass_reference(laplacian, accumulate, transpose):
    rng = np.random.default_rng(1)
    src = rng.standard_normal((7, 5))
    out = rng.standard_normal((5, 7) if transpose else (7, 5))
    expected = _pass_naive(src, out, 0.3, laplacian, accumulate, transpose)
    adi_pass_numpy(src, out, 0.3, laplacian, accumulate, transpose)
    np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("laplacian, accumulate, transpose", PASSES)
def test_adi_pass_kernel_matches_reference(backend, dtype, laplacian, accumulate, transpose):
    if not backend.is_gpu:
        pytest.skip("kernel test")
    rng = np.random.default_rng(2)
    for shape in ((70, 45), (64, 64), (3, 33)):
        src = rng.standard_normal(shape).astype(dtype)
        out = rng.standard_normal(shape[::-1] if transpose else shape).astype(dtype)
        expected = out.copy()
        adi_pass_numpy(src, expected, 0.7, laplacian, accumulate, transpose)
        got = backend.asarray(out)
        adi_pass(backend.asarray(src), got, 0.7, laplacian, accumulate, transpose)
        np.testing.assert_array_equal(backend.to_numpy(got), expected)  # no FMA: the same roundings


def _pr_step_sparse(t, s):
    """Peaceman–Rachford step assembled with scipy.sparse (edges as identity rows)."""
    n = t.shape[0]
    inner = np.zeros(n)
    inner[1:-1] = 1
    d2 = sp.diags([inner[1:], -2 * inner, inner[:-1]], [-1, 0, 1], shape=(n, n), format="csr")
    d2 = sp.diags(inner) @ d2  # edge rows zero
    dxx = sp.kron(sp.diags(inner), d2, format="csc")  # along i (contiguous), interior lines only
    dyy = sp.kron(d2, sp.diags(inner), format="csc")
    big = sp.identity(n * n, format="csc")
    half = spla.spsolve(big - s * dxx, (big + s * dyy) @ t.ravel())
    return spla.spsolve(big - s * dyy, (big + s * dxx) @ half).reshape(n, n)


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("method", ["thomas", "pcr", "hybrid", "checkerboard"])
def test_step_matches_assembled_peaceman_rachford(backend, method, sweep):
    rng = np.random.default_rng(3)
    t0 = rng.uniform(0, 1, (9, 9))
    expected = t0
    adi = ADI(backend.asarray(t0), method, sweep, {"dop": 4} if method == "checkerboard" else None)
    for s in (0.5, 7.0):  # 0.5: Zolfaghari's eqs. 3-4 (rho = 2)
        expected = _pr_step_sparse(expected, s)
        adi.step(s)
    np.testing.assert_allclose(backend.to_numpy(adi.t), expected, rtol=0, atol=1e-12)


def test_every_solver_and_sweep_agree(backend):
    ref = run_unsteady(np, 33, 5, np.float64, "thomas", "strided", dx=1 / 32, dt=0.01)["field"]
    for method in DIRECT + ["auto", "checkerboard"]:
        for sweep in SWEEPS:
            res = run_unsteady(backend.xp, 33, 5, np.float64, method, sweep, dx=1 / 32, dt=0.01)
            assert relative_l2(res["field"], ref) < 1e-12, (method, sweep)


def test_serial_cpu_run_is_the_same_scheme():
    t0 = initial_field(np, 33, np.float64, 1 / 32, 2, 1)
    ref = run_unsteady(np, 33, 7, np.float64, "thomas", "strided", dx=1 / 32, dt=0.004, k=2, l=1)["field"]
    assert relative_l2(serial_cpu_run(t0, 7, 0.004 * 32 * 32 / 2), ref) < 1e-13


def _orders(errors):
    return [math.log2(a / b) for a, b in zip(errors, errors[1:])]


def test_second_order_in_time():
    """Δx fixed (17² nodes on the unit square), Δt halved: error against the semi-discrete
    exact solution (the spatial error removed) falls 4x per halving."""
    errors = [run_unsteady(np, 17, steps, np.float64, "thomas", dx=1 / 16, dt=0.1 / steps, k=1, l=2)
              ["error_semi_discrete"] for steps in (8, 16, 32, 64)]
    assert all(1.9 < p < 2.1 for p in _orders(errors)), errors


def test_second_order_in_space_and_time():
    """Δt = Δx / 4 refined together: the error against the exact solution falls 4x per halving."""
    errors = [run_unsteady(np, n, (n - 1) // 2, np.float64, "thomas", dx=1 / (n - 1), dt=0.25 / (n - 1))
              ["error_exact"] for n in (9, 17, 33, 65)]
    assert all(1.9 < p < 2.1 for p in _orders(errors)), errors


@pytest.mark.parametrize("n", [16, 17])
def test_steady_centre_and_series(n):
    res = solve_steady(np, n, np.float64, "thomas", tol=1e-10)
    assert res["converged"] and abs(res["t_centre"] - 25) < 1e-7
    assert res["error_bound"] <= 1e-10 * 100


def test_steady_centre_line_second_order():
    errors = []
    for n in (9, 17, 33):
        res = solve_steady(np, n, np.float64, "thomas", tol=1e-10)
        y = np.linspace(0, 1, n)[1:-1]
        errors.append(np.abs(res["field"][1:-1, n // 2] - steady_series(0.5, y, terms=4000)).max())
    assert all(1.8 < p < 2.2 for p in _orders(errors)), errors


@pytest.mark.parametrize("sweep", SWEEPS)
def test_checkerboard_matches_thomas_with_remainder_piece(backend, sweep):
    """n = 20 nodes, dop = 8: the last piece has 4 rows."""
    ref = solve_steady(np, 20, np.float64, "thomas", params="optimal", tol=1e-11)
    res = solve_steady(backend.xp, 20, np.float64, "checkerboard", sweep, params="optimal", tol=1e-11,
                       options={"dop": 8, "maxiter": 100000})
    assert np.abs(res["field"] - ref["field"]).max() < 1e-6
    assert res["inner_iterations"] > res["iterations"]


def test_paper_parameters_and_stop_rule():
    assert parameters("paper", 64) == [0.5]
    assert len(parameters("cyclic", 1024)) > 3
    res = solve_steady(np, 16, np.float64, "thomas", params="paper", stop="paper")
    assert res["converged"] and res["sum_change_squared"] < 1e-6 and res["centre_error"] < 0.01


def test_cli_unsteady_writes_results(tmp_path, capsys):
    out = tmp_path / "u"
    assert main(["unsteady", "--n", "17", "--steps", "3", "--device", "cpu", "--out", str(out), "--compare-cpu",
                 "--dtype", "float64", "--solver", "pcr", "--sweep", "transpose"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eq10_vs_cpu"] < 1e-12 and summary["steps"] == 3
    for name in ("centreline.csv", "field.png", "profile.png"):
        assert (out / name).stat().st_size > 0
    assert "relative L2 error" in capsys.readouterr().out


def test_cli_steady_writes_results(tmp_path):
    out = tmp_path / "s"
    assert main(["steady", "--n", "17", "--device", "cpu", "--out", str(out), "--solver", "checkerboard",
                 "--dop", "5"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["converged"] and summary["centre_error"] < 1e-6 and summary["centreline_max_error"] < 0.5
    assert (out / "profile.png").stat().st_size > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tridiag.cases.heat", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, message", [
    (["unsteady", "--n", "2"], "--n must be >= 3 (got 2)"),
    (["unsteady", "--steps", "-1", "--n", "5"], "--steps must be >= 0 and <= 1000000000 (got -1)"),
    (["unsteady", "--dt", "0", "--n", "5"], "--dt must be >= 1e-30 and <= 1e+30 (got 0.0)"),
    (["steady", "--solver", "nope"], "invalid choice: 'nope'"),
    (["steady", "--n", "9", "--solver", "checkerboard", "--dop", "10"], "--dop must be >= 1 and <= 9 (got 10)"),
    (["steady", "--n", "40", "--solver", "checkerboard", "--dop", "33", "--memory", "shared"], "dop must be <= 32"),
    (["steady", "--tol", "-1", "--n", "5"], "--tol must be > 0"),
    (["steady", "--n", "9", "--solver", "checkerboard", "--inner-tol", "0"], "--inner-tol must be > 0"),
])
def test_cli_bad_input(tmp_path, args, message):
    proc = _cli(*args, "--device", "cpu", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_iteration_cap_exits_3(tmp_path):
    proc = _cli("steady", "--n", "17", "--maxiter", "2", "--device", "cpu", "--out", str(tmp_path / "o"))
    assert proc.returncode == 3 and "iteration cap" in proc.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["converged"] is False


@functools.cache
def _serial_1024(dtype):
    return serial_cpu_run(initial_field(np, 1024, dtype, 0.01), 100, 50.0)


@pytest.mark.gpu
@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("method", ["hybrid", "pcr", "pta", "auto"])
def test_gpu_against_cpu_eq10(backend, method, sweep):
    """Wei et al. 2013, eq. 10 at 1024² after 100 steps (r = 100): float32 <= 3e-6, float64 <= 1e-12."""
    if not backend.is_gpu:
        pytest.skip("GPU against CPU")
    for dtype, bound in ((np.float32, 3e-6), (np.float64, 1e-12)):
        gpu = run_unsteady(backend.xp, 1024, 100, dtype, method, sweep)["field"]
        assert relative_l2(gpu, _serial_1024(dtype)) <= bound, (dtype, relative_l2(gpu, _serial_1024(dtype)))

def test_steady_reports_a_failing_checkerboard_solve():
    with pytest.raises(ConvergenceError, match="checkerboard") as info:
        solve_steady(np, 17, np.float64, "checkerboard", options={"dop": 4, "maxiter": 1})
    assert info.value.reason == "iteration cap" and info.value.result["converged"] is False
