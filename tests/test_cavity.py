import json
import os
import subprocess
import sys

import meshio
import numpy as np
import pytest

from fem3d import cavity
from fem3d.backend import cupy_module
from fem3d.errors import InputError
from fem3d.fields import evaluate, locate
from fem3d.mesh import box_mesh
from fem3d.problems import lid_driven_problem
from fem3d.references import PROFILE_POINTS
from support import MESHES


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fem3d.cavity", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cavity")
    p = run("--n", "3", "--re", "100", "--device", "cpu", "--out", str(out))
    return p, out


def test_small_run_writes_every_output(small_run):
    p, out = small_run
    assert p.returncode == 0, p.stderr
    assert "picard   1  residual" in p.stdout and "T_unit" in p.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["converged"] and summary["reason"] == "converged" and summary["re"] == 100.0
    assert summary["mesh"]["box"] == [3, 3, 3] and summary["dofs"] == 3 * 7**3 + 4**3
    assert summary["picard_steps"] == len(summary["continuation"][0]["steps"]) > 2
    assert summary["t_unit_us"] > 0 and summary["cg_iterations"] > 0
    assert {"data_preparation", "element_matrices", "preconditioner", "solve", "output"} <= set(summary["times_s"])
    assert set(summary["files"]) >= {"cavity.vtu", "profiles.csv", "summary.json", "profiles.png"}
    for f in summary["files"]:
        assert (out / f).stat().st_size > 1000


def test_vtu_holds_the_solution_on_hexahedron27_cells(small_run):
    _, out = small_run
    m = meshio.read(out / "cavity.vtu")
    assert m.cells[0].type == "hexahedron27" and m.cells[0].data.shape == (27, 27)
    vel, p, speed, vort = (m.point_data[k] for k in ("velocity", "pressure", "speed", "vorticity"))
    assert vel.shape == (7**3, 3) and vort.shape == (7**3, 3)
    assert np.allclose(speed, np.linalg.norm(vel, axis=1))
    lid = np.isclose(m.points[:, 1], 1) & (m.points[:, 0] > 0) & (m.points[:, 0] < 1) & (m.points[:, 2] > 0) & (m.points[:, 2] < 1)
    assert np.allclose(vel[lid], [1, 0, 0], atol=1e-8)
    edge = np.isclose(m.points[:, 1], 1) & np.isclose(m.points[:, 0], 0)
    assert np.allclose(vel[edge], 0, atol=1e-8)  # walls win where they meet the lid
    assert abs(p.mean()) < 1.0 and np.isfinite(p).all()
    assert np.abs(vort[:, 2]).max() > 1.0  # the lid shears the flow about z


def test_profiles_are_finite_element_values(small_run):
    _, out = small_run
    rows = np.genfromtxt(out / "profiles.csv", delimiter=",", names=True, dtype=None, encoding=None)
    vert = rows[rows["profile"] == "u_vertical"]
    assert len(vert) >= PROFILE_POINTS and np.all(np.diff(vert["s"]) > 0)
    assert np.allclose(vert["x"], 0.5) and np.allclose(vert["z"], 0.5)
    assert vert["u"][-1] == pytest.approx(0.0, abs=1e-8) or vert["y"][-1] == 1.0
    assert vert["u"].min() < -0.1  # the return flow under the primary vortex
    # not nearest-node values: points between nodes differ from every nodal value around them
    m = meshio.read(out / "cavity.vtu")
    between = vert[np.isclose(vert["s"], 0.5 + 1 / 64)]
    assert len(between) == 1
    on_line = np.isclose(m.points[:, 0], 0.5) & np.isclose(m.points[:, 2], 0.5)
    assert np.min(np.abs(m.point_data["velocity"][on_line, 0] - between["u"][0])) > 1e-4


def test_evaluation_on_a_mesh_matches_the_interpolant():
    mesh = box_mesh(2, grading=1.0)
    f = lambda p: np.stack([p[:, 0] * p[:, 1], p[:, 2] ** 2, p[:, 0] - p[:, 1]], axis=1)
    x = np.concatenate([f(mesh.points).T.ravel(), mesh.points[mesh.pressure_nodes] @ [1.0, -2.0, 0.5]])
    pts = np.random.default_rng(0).uniform(0, 1, (40, 3))
    vel, p = evaluate(mesh, x, *locate(mesh, pts))
    assert np.allclose(vel, f(pts), atol=1e-13) and np.allclose(p, pts @ [1.0, -2.0, 0.5], atol=1e-13)
    elem, _ = locate(mesh, np.array([[1.5, 0.5, 0.5]]))
    assert elem[0] == -1


def test_lid_nodes_and_continuation_steps():
    mesh = box_mesh(2)
    problem = lid_driven_problem(mesh, 100.0, "y=1")
    moving = problem.bc_nodes[problem.bc_values[:, 0] == 1.0]
    assert len(moving) == 3 * 3 and np.all(mesh.points[moving, 1] == 1.0)
    assert len(problem.bc_nodes) == mesh.n_nodes - 3**3
    assert cavity.continuation_steps("auto", 1000.0) == [400.0]
    assert cavity.continuation_steps("auto", 2500.0) == [400.0, 1000.0] and len(cavity.continuation_steps("auto", 3000.0)) == 3
    assert cavity.continuation_steps("auto", 400.0) == [] and cavity.continuation_steps("none", 1e4) == []
    assert cavity.continuation_steps("auto", 3000.0) == [400.0, 783.0, 1530.0]
    assert cavity.continuation_steps("400,100", 1000.0) == [100.0, 400.0]
    with pytest.raises(InputError, match="--continuation must be > 0 and <= 1000"):
        cavity.continuation_steps("100,2000", 1000.0)
    with pytest.raises(InputError, match="--continuation"):
        cavity.continuation_steps("fast", 1000.0)


def test_mesh_file_with_tagged_lid(tmp_path):
    p = run("--mesh", os.path.join(MESHES, "distorted_cube_hex8.msh"), "--lid", "lid", "--device", "cpu", "--out", str(tmp_path),
            "--no-plots", "--quiet")
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] and summary["mesh"]["file"].endswith("distorted_cube_hex8.msh") and summary["mesh"]["elements"] == 216


def test_not_converged_still_writes_marked_results(tmp_path):
    p = run("--n", "2", "--max-picard", "2", "--device", "cpu", "--out", str(tmp_path), "--no-plots")
    assert p.returncode == 3 and "not converged (max_picard)" in p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] is False and summary["reason"] == "max_picard" and summary["picard_steps"] == 2
    assert (tmp_path / "cavity.vtu").exists() and (tmp_path / "profiles.csv").exists()


def test_no_vtu_skips_the_solution_file_and_float32_storage_is_recorded(tmp_path):
    p = run("--n", "2", "--device", "cpu", "--out", str(tmp_path), "--no-plots", "--no-vtu", "--matrix-dtype", "float32", "--quiet")
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["files"] == ["solution.npy", "profiles.csv", "summary.json"] and not (tmp_path / "cavity.vtu").exists()
    assert summary["options"]["matrix_dtype"] == "float32" and summary["converged"]


def test_restart_from_a_saved_solution(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    p = run("--n", "2", "--re", "50", "--device", "cpu", "--out", str(first), "--no-plots", "--no-vtu", "--quiet")
    assert p.returncode == 0, p.stderr
    x = np.load(first / "solution.npy")
    assert x.shape == (json.loads((first / "summary.json").read_text())["dofs"],)
    p = run("--n", "2", "--re", "50", "--initial", str(first / "solution.npy"), "--continuation", "none", "--device", "cpu",
            "--out", str(second), "--no-plots", "--no-vtu", "--quiet")
    assert p.returncode == 0, p.stderr
    summary = json.loads((second / "summary.json").read_text())
    assert summary["picard_steps"] == 1 and summary["continuation"][0]["steps"][0]["change"] < 1e-6
    assert np.abs(np.load(second / "solution.npy") - x).max() < 1e-6


def test_restart_file_must_match_the_mesh(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(10))
    p = run("--n", "2", "--initial", str(tmp_path / "x.npy"), "--device", "cpu", "--out", str(tmp_path), "--quiet")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--initial" in p.stderr and "expected" in p.stderr


def test_nan_during_picard_stops_and_writes_marked_results(tmp_path, monkeypatch, capsys):
    import fem3d.assembly as asm

    monkeypatch.setattr(asm, "upwind_tau", lambda xp, a, J, re, mid: xp.full(a.shape[:2] + (27,), np.nan))
    from fem3d.errors import run_cli

    code = run_cli(cavity.main, ["--n", "2", "--device", "cpu", "--out", str(tmp_path), "--no-plots", "--quiet"], prog="fem3d.cavity")
    assert code == 3 and "not converged (nan)" in capsys.readouterr().err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] is False and summary["reason"] == "nan" and summary["picard_steps"] == 1


BAD = [
    (["--re", "0"], "--re must be > 0"),
    (["--re", "-100"], "--re must be > 0"),
    (["--n", "0"], "--n must be >= 1"),
    (["--nx", "0"], "--nx must be >= 1"),
    (["--grading", "-1"], "--grading must be >= 0"),
    (["--out", "/proc/cannot-write-here"], "--out /proc/cannot-write-here is not a writable directory"),
    (["--mesh", "MESHES/annulus_hex27.msh"], "--lid y=1: no boundary face of the mesh is on the lid"),
    (["--mesh", "MESHES/annulus_hex27.msh", "--lid", "lid"], "boundary tag 'lid' not in the mesh (tags: ends, inner, outer)"),
    (["--lid", "q=1"], "--lid q=1: the plane must read"),
    (["--mesh", "MESHES/distorted_cube_hex8.msh", "--n", "4"], "--mesh cannot be combined"),
    (["--mesh", "missing.msh"], "--mesh file not found"),
    (["--continuation", "soon"], "--continuation must be auto, none or"),
    (["--device", "quantum"], "--device must be one of auto, cpu, gpu"),
    (["--relax", "0"], "--relax must be > 0"),
]


@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    args = [a.replace("MESHES", MESHES) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    p = run(*args, "--device", "cpu") if "--device" not in args else run(*args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_help_mentions_defaults():
    p = run("--help")
    assert p.returncode == 0 and "laptop CPU" in p.stdout and "--continuation" in p.stdout


def test_slice_png_rendered_off_screen(small_run):
    pytest.importorskip("pyvista")
    _, out = small_run
    from PIL import Image

    img = np.asarray(Image.open(out / "slice.png").convert("RGB"), dtype=float)
    assert img.shape[0] > 500 and img.std() > 20  # a real picture, not a blank canvas


@pytest.mark.gpu
def test_cpu_and_gpu_profiles_agree(tmp_path):
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    common = ["--n", "3", "--re", "400", "--tol", "1e-11", "--cg-tol", "1e-14", "--forcing", "0", "--no-plots", "--quiet"]
    profiles = []
    for device in ("cpu", "gpu"):
        p = run(*common, "--device", device, "--out", str(tmp_path / device))
        assert p.returncode == 0, p.stderr
        profiles.append(np.genfromtxt(tmp_path / device / "profiles.csv", delimiter=",", skip_header=1, usecols=(5, 6, 7)))
    assert np.abs(profiles[0] - profiles[1]).max() < 1e-8
