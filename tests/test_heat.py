"""Heat conduction and the one Peaceman–Rachford sweep of the 2D cases: tridiag.cases.peaceman_rachford,
tridiag.kernels.adi_rhs, tridiag.cases.heat (CLI)."""

import functools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from gpucfd.backend import get_backend
from gpucfd.errors import ConvergenceError, InputError
from tridiag.cases.heat import main
from tridiag.cases.heat_exact import steady_series
from tridiag.cases.heat_steady import parameters, solve_steady
from tridiag.cases.heat_unsteady import initial_field, relative_l2, run_unsteady, serial_cpu_run
from tridiag.cases.line_solver import ITERATIVE, LAYOUTS, LIBRARY
from tridiag.cases.peaceman_rachford import FusedADI, LibraryADI, make_adi, spectrum
from tridiag.kernels.adi_rhs import adi_pass, adi_pass_numpy

CPU = get_backend("cpu")
PASSES = [(lap, acc, tr) for lap in (True, False) for acc in (False, True) for tr in (False, True)]


def _pass_naive(src, out, c0, c1, laplacian, accumulate, transpose, fixed, source, cs):
    rows, cols = src.shape
    value = np.array(src, np.float64)
    if laplacian:
        value[:] = 0
        for j in range(1, rows - 1):
            for i in range(1, cols - 1):
                if fixed is None or not fixed[j, i]:
                    value[j, i] = (
                        c1 * (src[j, i - 1] - 2 * src[j, i] + src[j, i + 1])
                        + c0 * (src[j - 1, i] - 2 * src[j, i] + src[j + 1, i])
                        + (0 if source is None else cs * source[j, i])
                    )
    value = value.T if transpose else value
    return out + value if accumulate else value


def _pass_inputs(rng, shape, dtype, transpose, masked):
    src = rng.standard_normal(shape).astype(dtype)
    out = rng.standard_normal(shape[::-1] if transpose else shape).astype(dtype)
    fixed = rng.random(shape) < 0.2 if masked else None
    source = rng.standard_normal(shape).astype(dtype) if masked else None
    return src, out, fixed, source


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("laplacian, accumulate, transpose", PASSES)
def test_adi_pass_reference(laplacian, accumulate, transpose, masked):
    src, out, fixed, source = _pass_inputs(np.random.default_rng(1), (7, 5), np.float64, transpose, masked)
    expected = _pass_naive(src, out, 0.3, 1.7, laplacian, accumulate, transpose, fixed, source, 0.9)
    adi_pass_numpy(src, out, 0.3, 1.7, laplacian, accumulate, transpose, fixed, source, 0.9)
    np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("laplacian, accumulate, transpose", PASSES)
def test_adi_pass_kernel_matches_reference(backend, dtype, laplacian, accumulate, transpose, masked):
    if not backend.is_gpu:
        pytest.skip("kernel test")
    rng = np.random.default_rng(2)
    for shape in ((70, 45), (64, 64), (3, 33)):
        src, out, fixed, source = _pass_inputs(rng, shape, dtype, transpose, masked)
        expected = out.copy()
        adi_pass_numpy(src, expected, 0.7, 0.4, laplacian, accumulate, transpose, fixed, source, 1.3)
        got = backend.asarray(out)
        adi_pass(
            backend.asarray(src),
            got,
            0.7,
            0.4,
            laplacian,
            accumulate,
            transpose,
            None if fixed is None else backend.asarray(fixed),
            None if source is None else backend.asarray(source),
            1.3,
        )
        np.testing.assert_array_equal(backend.to_numpy(got), expected)  # no FMA: the same roundings


def _pr_sweep_sparse(u, rho, hx, hy, fixed, f):
    """The textbook Peaceman–Rachford double sweep (ρ − δxx/hx²) u* = (ρ + δyy/hy²) u + f,
    (ρ − δyy/hy²) u⁺ = (ρ + δxx/hx²) u* + f, assembled with scipy.sparse; fixed nodes (the box
    edge and ``fixed``) are identity rows keeping u."""
    ny, nx = u.shape
    free = np.ones((ny, nx), bool)
    free[0] = free[-1] = free[:, 0] = free[:, -1] = False
    free &= ~fixed
    keep = sp.diags((~free).ravel().astype(float))
    on = sp.diags(free.ravel().astype(float))

    def second(n, h):
        return sp.diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]) / h**2

    dxx = on @ sp.kron(sp.identity(ny), second(nx, hx))
    dyy = on @ sp.kron(second(ny, hy), sp.identity(nx))
    big, fr = sp.identity(nx * ny), (free * f).ravel()
    star = spla.spsolve((rho * on + keep - dxx).tocsc(), rho * on @ u.ravel() + keep @ u.ravel() + dyy @ u.ravel() + fr)
    new = spla.spsolve((rho * on + keep - dyy).tocsc(), rho * on @ star + keep @ star + dxx @ star + fr)
    assert big.shape[0] == new.size
    return new.reshape(ny, nx)


def _pr_case(rng):
    """A 9 x 12 node field with two fixed interior nodes, a source, hx != hy, and two parameters."""
    u0 = rng.uniform(0, 1, (9, 12))
    fixed = np.zeros(u0.shape, bool)
    fixed[4, 5] = fixed[5, 5] = True
    return u0, fixed, rng.standard_normal(u0.shape), 0.1, 0.07, (40.0, 700.0)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("solver", ["thomas", "pcr", "hybrid", "pta", "checkerboard"])
def test_library_sweep_matches_assembled_peaceman_rachford(backend, solver, layout):
    u0, fixed, f, hx, hy, rhos = _pr_case(np.random.default_rng(3))
    expected = u0
    adi = make_adi(
        backend.xp,
        u0.shape,
        np.float64,
        solver,
        hx,
        hy,
        fixed,
        layout,
        {"dop": 4} if solver == "checkerboard" else None,
        iterative=True,
    )
    assert isinstance(adi, LibraryADI)
    u = backend.asarray(u0)
    for rho in rhos:
        expected = _pr_sweep_sparse(expected, rho, hx, hy, fixed, f)
        before = np.array(backend.to_numpy(u))
        delta = adi.sweep(u, rho, backend.asarray(f))
        np.testing.assert_allclose(backend.to_numpy(delta), backend.to_numpy(u) - before, atol=1e-14)
    np.testing.assert_allclose(backend.to_numpy(u), expected, rtol=0, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_sweep_matches_assembled_peaceman_rachford(backend, dtype):
    if not backend.is_gpu:
        pytest.skip("the fused sweeps run on the GPU")
    u0, fixed, f, hx, hy, rhos = _pr_case(np.random.default_rng(4))
    expected = u0
    adi = make_adi(backend.xp, u0.shape, dtype, "fused", hx, hy, fixed, keep_delta=True)
    assert isinstance(adi, FusedADI)
    u = backend.asarray(u0.astype(dtype))
    for rho in rhos:
        expected = _pr_sweep_sparse(expected, rho, hx, hy, fixed, f)
        before = np.array(backend.to_numpy(u))
        delta = adi.sweep(u, rho, backend.asarray(f.astype(dtype)))
        np.testing.assert_allclose(
            backend.to_numpy(delta), backend.to_numpy(u) - before, atol=1e-5 if dtype == np.float32 else 1e-14
        )
    np.testing.assert_allclose(backend.to_numpy(u), expected, rtol=0, atol=2e-5 if dtype == np.float32 else 1e-12)


def test_every_solver_and_layout_agree(backend):
    ref = run_unsteady(CPU, 33, 5, np.float64, "thomas", "natural", dx=1 / 32, dt=0.01)["field"]
    for solver in ("auto", *LIBRARY):
        for layout in LAYOUTS:
            res = run_unsteady(
                backend, 33, 5, np.float64, solver, "auto" if solver == "auto" else layout, dx=1 / 32, dt=0.01
            )
            assert relative_l2(res["field"], ref) < 1e-12, (solver, layout)


def test_serial_cpu_run_is_the_same_scheme():
    t0 = initial_field(np, 33, np.float64, 1 / 32, 2, 1)
    ref = run_unsteady(CPU, 33, 7, np.float64, "thomas", "natural", dx=1 / 32, dt=0.004, kx=2, ky=1)["field"]
    assert relative_l2(serial_cpu_run(t0, 7, 0.004 * 32 * 32), ref) < 1e-13


def test_spectrum_bounds_the_line_eigenvalues():
    shape, hx, hy = (9, 13), 0.5, 0.25
    low, high = spectrum(shape, hx, hy)
    eig = [
        np.linalg.eigvalsh(-(np.diag(np.ones(n - 3), -1) - 2 * np.eye(n - 2) + np.diag(np.ones(n - 3), 1)) / h**2)
        for n, h in zip(shape, (hy, hx))
    ]
    assert low == pytest.approx(min(e.min() for e in eig), rel=1e-12)
    assert high == pytest.approx(max(e.max() for e in eig), rel=1e-12)


def test_make_adi_refuses_what_does_not_apply():
    with pytest.raises(InputError, match="--solver fused needs a GPU"):
        make_adi(np, (9, 9), np.float64, "fused")
    with pytest.raises(InputError, match="--layout applies to the library solvers"):
        make_adi(np, (9, 9), np.float64, "fused", layout="natural")
    with pytest.raises(InputError, match="iterative line solver"):
        make_adi(np, (9, 9), np.float64, "checkerboard")
    assert ITERATIVE == ("checkerboard",)


def _orders(errors):
    return [math.log2(a / b) for a, b in zip(errors, errors[1:])]


def test_second_order_in_time():
    """Δx fixed (17² nodes on the unit square), Δt halved: error against the semi-discrete
    exact solution (the spatial error removed) falls 4x per halving."""
    errors = [
        run_unsteady(CPU, 17, steps, np.float64, "thomas", dx=1 / 16, dt=0.1 / steps, kx=1, ky=2)["error_semi_discrete"]
        for steps in (8, 16, 32, 64)
    ]
    assert all(1.9 < p < 2.1 for p in _orders(errors)), errors


def test_second_order_in_space_and_time():
    """Δt = Δx / 4 refined together: the error against the exact solution falls 4x per halving."""
    errors = [
        run_unsteady(CPU, n, (n - 1) // 2, np.float64, "thomas", dx=1 / (n - 1), dt=0.25 / (n - 1))["error_exact"]
        for n in (9, 17, 33, 65)
    ]
    assert all(1.9 < p < 2.1 for p in _orders(errors)), errors


@pytest.mark.parametrize("n", [16, 17])
def test_steady_centre_and_series(n):
    res = solve_steady(CPU, n, np.float64, "thomas", tol=1e-10)
    assert res["converged"] and abs(res["t_centre"] - 25) < 1e-7
    assert res["error_bound"] <= 1e-10 * 100


def test_steady_centre_line_second_order():
    errors = []
    for n in (9, 17, 33):
        res = solve_steady(CPU, n, np.float64, "thomas", tol=1e-10)
        y = np.linspace(0, 1, n)[1:-1]
        errors.append(np.abs(res["field"][1:-1, n // 2] - steady_series(0.5, y, terms=4000)).max())
    assert all(1.8 < p < 2.2 for p in _orders(errors)), errors


@pytest.mark.parametrize("layout", ["natural", "contiguous"])
def test_checkerboard_matches_thomas_with_remainder_piece(backend, layout):
    """n = 20 nodes, dop = 8: the last piece has 4 rows."""
    ref = solve_steady(CPU, 20, np.float64, "thomas", params="optimal", tol=1e-11)
    res = solve_steady(
        backend,
        20,
        np.float64,
        "checkerboard",
        layout,
        params="optimal",
        tol=1e-11,
        options={"dop": 8, "maxiter": 100000},
    )
    assert np.abs(res["field"] - ref["field"]).max() < 1e-6
    assert res["inner_iterations"] > res["iterations"]


def test_paper_parameters_and_stop_rule():
    assert parameters("paper", 64) == [pytest.approx(2 * 63**2, rel=1e-15)]
    cycle = parameters("cyclic", 1024)
    assert len(cycle) > 3 and cycle == sorted(cycle, reverse=True)
    assert parameters("optimal", 65) == [pytest.approx(math.sqrt(math.prod(spectrum((65, 65), 1 / 64, 1 / 64))))]
    every = solve_steady(CPU, 16, np.float64, "thomas", params="paper", stop="paper", check_every=1)
    assert every["converged"] and every["sum_change_squared"] < 1e-6 and every["centre_error"] < 0.01
    tenth = solve_steady(CPU, 16, np.float64, "thomas", params="paper", stop="paper")  # tested every 10 iterations
    assert tenth["iterations"] % 10 == 0 and every["iterations"] <= tenth["iterations"] < every["iterations"] + 10


def test_cli_unsteady_writes_results(tmp_path, capsys):
    out = tmp_path / "u"
    assert (
        main(
            [
                "unsteady",
                "--n",
                "17",
                "--steps",
                "3",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--compare-cpu",
                "--dtype",
                "float64",
                "--solver",
                "pcr",
                "--layout",
                "contiguous",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eq10_vs_cpu"] < 1e-12 and summary["steps"] == 3
    for name in ("centreline.csv", "field.png", "profile.png"):
        assert (out / name).stat().st_size > 0
    assert "relative L2 error" in capsys.readouterr().out


def test_cli_steady_writes_results(tmp_path):
    out = tmp_path / "s"
    assert (
        main(["steady", "--n", "17", "--device", "cpu", "--out", str(out), "--solver", "checkerboard", "--dop", "5"])
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["converged"] and summary["centre_error"] < 1e-6 and summary["centreline_max_error"] < 0.5
    assert (out / "profile.png").stat().st_size > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tridiag.cases.heat", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["unsteady", "--n", "2"], "--n must be >= 3 (got 2)"),
        (["unsteady", "--steps", "-1", "--n", "5"], "--steps must be >= 0 and <= 1000000000 (got -1)"),
        (["unsteady", "--dt", "0", "--n", "5"], "--dt must be >= 1e-30 and <= 1e+30 (got 0.0)"),
        (["steady", "--solver", "nope"], "--solver must be one of auto, fused, thomas"),
        (["steady", "--layout", "diagonal"], "--layout must be one of auto, natural, contiguous, interleaved"),
        (["unsteady", "--n", "9", "--steps", "3", "--solver", "fused"], "--solver fused needs a GPU"),
        (["steady", "--n", "9", "--solver", "checkerboard", "--dop", "10"], "--dop must be >= 1 and <= 9 (got 10)"),
        (["steady", "--n", "40", "--solver", "checkerboard", "--dop", "33", "--memory", "shared"], "dop must be <= 32"),
        (["steady", "--tol", "-1", "--n", "5"], "--tol must be > 0"),
        (["steady", "--n", "9", "--solver", "checkerboard", "--inner-tol", "0"], "--inner-tol must be > 0"),
    ],
)
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
    return serial_cpu_run(initial_field(np, 1024, dtype, 0.01), 100, 100.0)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "solver, layout",
    [(s, lay) for s in ("hybrid", "pcr", "pta", "tuned") for lay in LAYOUTS] + [("fused", "auto"), ("auto", "auto")],
)
def test_gpu_against_cpu_eq10(backend, solver, layout):
    """Wei et al. 2013, eq. 10 at 1024² after 100 steps (r = 100): float32 <= 3e-6, float64 <= 1e-12."""
    if not backend.is_gpu:
        pytest.skip("GPU against CPU")
    for dtype, bound in ((np.float32, 3e-6), (np.float64, 1e-12)):
        gpu = run_unsteady(backend, 1024, 100, dtype, solver, layout)["field"]
        assert relative_l2(gpu, _serial_1024(dtype)) <= bound, (dtype, relative_l2(gpu, _serial_1024(dtype)))


def test_steady_reports_a_failing_checkerboard_solve():
    with pytest.raises(ConvergenceError, match="checkerboard") as info:
        solve_steady(CPU, 17, np.float64, "checkerboard", options={"dop": 4, "maxiter": 1})
    assert info.value.reason == "iteration cap" and info.value.result["converged"] is False
