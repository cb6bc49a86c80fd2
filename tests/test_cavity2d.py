"""python -m tridiag.cases.cavity2d: a short Re 100 run against Ghia et al., its files, bad input, divergence."""

import json
import subprocess
import sys

import meshio
import numpy as np
import pytest

from gpucfd.backend import cupy_module, get_backend
from tridiag.cases import ghia1982
from tridiag.cases.cavity2d_output import analyse
from tridiag.cases.cavity2d_problem import cavity
from tridiag.cases.vorticity import velocity


CPU = get_backend("cpu")


def run(*args):
    return subprocess.run([sys.executable, "-m", "tridiag.cases.cavity2d", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def re100_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cavity2d")
    return run("--n", "32", "--re", "100", "--device", "cpu", "--solver", "thomas", "--out", str(out)), out


def test_re100_on_32_cells_matches_ghia(re100_run):
    p, out = re100_run
    assert p.returncode == 0, p.stderr
    assert "iteration " in p.stdout and "residual" in p.stdout and "vs Ghia et al. 1982" in p.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["converged"] and s["residual"] <= 1e-6 and s["nodes"] == [33, 33] and s["iterations"] <= 1000
    # measured on 32^2 (h = 1/32): max |du| 0.0089, max |dv| 0.0073, psi_min -0.10043 (Ghia's 129^2: -0.103423)
    assert s["ghia"]["max_abs_du"] < 0.012 and s["ghia"]["max_abs_dv"] < 0.010
    assert s["psi_min"]["value"] == pytest.approx(-0.1004, abs=5e-4)
    assert s["psi_min"]["x"] == pytest.approx(0.6172, abs=0.02) and s["psi_min"]["y"] == pytest.approx(0.7344, abs=0.02)
    assert s["residual_history"][-1][1] == s["residual"] and s["seconds"] > 0


def test_files_hold_the_fields_and_profiles(re100_run):
    _, out = re100_run
    s = json.loads((out / "summary.json").read_text())
    assert set(s["files"]) == {"summary.json", "profiles.csv", "cavity2d.vtu", "fields.png", "profiles.png"}
    for f in s["files"]:
        assert (out / f).stat().st_size > 1000
    m = meshio.read(out / "cavity2d.vtu")
    assert m.cells[0].type == "quad" and len(m.cells[0].data) == 32 * 32 and len(m.points) == 33 * 33
    assert set(m.point_data) == {"psi", "omega", "u", "v"}
    lid = np.isclose(m.points[:, 1], 1) & (m.points[:, 0] > 0) & (m.points[:, 0] < 1)
    assert np.allclose(m.point_data["u"][lid], 1.0) and np.allclose(
        m.point_data["psi"][np.isclose(m.points[:, 0], 0)], 0
    )
    rows = np.genfromtxt(out / "profiles.csv", delimiter=",", names=True, dtype=None, encoding=None)
    ghia = rows[(rows["profile"] == "u_vertical") & (rows["point"] == "ghia")]
    assert len(ghia) == 17 and np.allclose(ghia["value"] - ghia["ghia"], ghia["difference"], atol=1e-9)
    assert np.abs(ghia["difference"]).max() == pytest.approx(s["ghia"]["max_abs_du"], abs=1e-9)
    grid_u = rows[(rows["profile"] == "u_vertical") & (rows["point"] == "grid")]
    assert len(grid_u) == 33 and grid_u["value"][-1] == pytest.approx(1.0)


def test_fixed_iteration_mode_runs_exactly_that_many(tmp_path):
    p = run(
        "--n",
        "16",
        "--iterations",
        "30",
        "--device",
        "cpu",
        "--solver",
        "pcr",
        "--out",
        str(tmp_path),
        "--no-plots",
        "--quiet",
    )
    assert p.returncode == 0 and p.stdout == "", p.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["iterations"] == 30 and s["mode"] == "fixed iterations" and s["methods"] == {"x": "pcr", "y": "pcr"}
    assert "fields.png" not in s["files"]


def test_float32_agrees_with_float64():
    fields = []
    for dtype in (np.float64, np.float32):
        vs, psi, omega = cavity(CPU, 16, 100.0, solver="thomas", dtype=dtype)
        vs.march(psi, omega, 200, check_every=200)
        fields.append(psi.astype(np.float64))
    assert fields[1].dtype == np.float64 and np.abs(fields[1] - fields[0]).max() < 1e-5


def test_analysis_against_ghia_is_exact_for_ghia_data():
    """Sampling a field that reproduces Ghia's u exactly gives zero difference at their points."""
    vs, psi, omega = cavity(CPU, 128, 100.0)
    y = vs.grid.coordinates()[1]
    yr, ur = ghia1982.reference(100)["u"]
    u = np.tile(np.interp(y, yr[::-1], ur[::-1])[:, None], (1, vs.grid.nx))
    a = analyse(vs.grid, np.asarray(psi), u, np.zeros_like(u), 100.0)
    assert a["ghia"]["max_abs_du"] < 1e-12  # Ghia's points are nodes of the 128-cell grid


@pytest.mark.parametrize(
    "args, message",
    [
        (["--n", "2"], "--n must be >= 4"),
        (["--n", "4.5"], "argument --n: invalid int value"),
        (["--re", "0"], "--re must be >= 0.001 and <= 100000 (got 0.0)"),
        (["--re", "-100"], "--re must be >= 0.001"),
        (
            ["--solver", "fast"],
            "--solver must be one of auto, fused, thomas, pta, cr, cr_sorted, pcr, checkerboard, hybrid, tuned",
        ),
        (["--iterations", "-1"], "--iterations must be >= 0"),
        (["--dt", "0"], "--dt must be > 0"),
        (["--tol", "-1"], "--tol must be >= 2.22045e-16 and < 1 (got -1.0)"),
        (["--psi-sweeps", "0"], "--psi-sweeps must be >= 1"),
        (["--device", "quantum"], "--device must be one of auto, cpu, gpu"),
        (["--dtype", "float16"], "--dtype must be one of float64, float32"),
        (["--out", "/proc/cannot-write-here"], "--out /proc/cannot-write-here is not a writable directory"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    if "--out" not in args:
        args = args + ["--out", str(tmp_path / "out")]
    p = run(*args) if "--device" in args else run(*args, "--device", "cpu")
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_divergence_exits_3_naming_the_time_step(tmp_path):
    p = run("--n", "16", "--re", "5000", "--dt", "20", "--device", "cpu", "--out", str(tmp_path), "--check-every", "10")
    assert p.returncode == 3
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "not converged (diverged)" in err and "Δt = 20" in err and "CFL number" in err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["converged"] is False and s["reason"] == "diverged"


def test_iteration_cap_exits_3_and_marks_results(tmp_path):
    p = run(
        "--n",
        "16",
        "--max-iterations",
        "20",
        "--check-every",
        "10",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plots",
    )
    assert p.returncode == 3 and "not converged (iteration cap)" in p.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["converged"] is False and s["iterations"] == 20 and (tmp_path / "cavity2d.vtu").exists()


def test_help():
    p = run("--help")
    assert p.returncode == 0 and "--iterations" in p.stdout and "cells per side" in p.stdout


@pytest.mark.gpu
@pytest.mark.parametrize(
    "solver, layout",
    [
        ("thomas", "auto"),
        ("pta", "auto"),
        ("pta", "contiguous"),
        ("cr", "auto"),
        ("pcr", "natural"),
        ("hybrid", "auto"),
        ("hybrid", "interleaved"),
        ("auto", "auto"),
    ],
)
def test_gpu_matches_cpu(solver, layout):
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    fields = []
    for device in ("cpu", "gpu"):
        backend = get_backend(device)
        vs, psi, omega = cavity(
            backend,
            48,
            400.0,
            solver=solver if device == "gpu" else "thomas",
            layout=layout if device == "gpu" else "auto",
        )
        vs.march(psi, omega, 100, check_every=50)
        u, v = velocity(psi, vs.grid, vs.boundary)
        fields.append(np.concatenate([backend.to_numpy(f).ravel() for f in (psi, omega, u, v)]))
    assert np.abs(fields[1] - fields[0]).max() < 1e-10 * np.abs(fields[0]).max()
