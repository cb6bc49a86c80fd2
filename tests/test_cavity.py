import json
import os
import subprocess
import sys
from functools import partial

import meshio
import numpy as np
import pytest

import broken_drawings
from fem3d import cavity
from fem3d.commands import plots
from gpucfd.backend import cupy_module, get_backend
from gpucfd.errors import InputError, run_cli
from fem3d.discretisation.fields import centre_line, evaluate, locate, mid_plane
from fem3d.discretisation.mesh import box_mesh
from fem3d.problems import memory
from fem3d.problems.lid_driven import lid_driven_problem
from fem3d.problems.references import PROFILE_POINTS
from fem3d.solvers.nonlinear import continuation_steps
from support import MESHES

RESULTS = ["solution.npy", "cavity.vtu", "profiles.csv", "summary.json"]
PICTURES = ["profiles.png", "slice.png"]


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fem3d.cavity", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's first cavity command, exactly: Re 100 on 8^3 elements into ./cavity-out."""
    cwd = tmp_path_factory.mktemp("readme")
    p = subprocess.run([sys.executable, "-m", "fem3d.cavity"], capture_output=True, text=True, cwd=cwd)
    return p, cwd / "cavity-out"


def test_readme_command_writes_every_promised_file(readme_run):
    p, out = readme_run
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "picard   1  residual" in p.stdout and "T_unit" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == f"wrote cavity-out/: {', '.join(RESULTS + PICTURES)}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["converged"] and summary["reason"] == "converged" and summary["re"] == 100.0
    assert summary["command"] == "python -m fem3d.cavity" and summary["warnings"] == []
    assert summary["mesh"]["box"] == [8, 8, 8] and summary["dofs"] == 3 * 17**3 + 9**3
    assert summary["nonlinear_steps"] == len(summary["continuation"][0]["steps"]) > 2
    assert summary["t_unit_us"] > 0 and summary["linear_iterations"] > 0 and summary["residual"] <= 1e-6
    assert {"data_preparation", "element_matrices", "linear_setup", "solve", "output"} <= set(summary["times_s"])
    assert summary["files"] == RESULTS + PICTURES and sorted(os.listdir(out)) == sorted(
        RESULTS + PICTURES
    )  # no temporaries
    for f in summary["files"]:
        assert (out / f).stat().st_size > 1000
    assert np.load(out / "solution.npy").shape == (summary["dofs"],)


def test_readme_command_draws_the_mid_plane_with_streamlines(readme_run):
    from PIL import Image

    _, out = readme_run
    img = np.asarray(Image.open(out / "slice.png").convert("RGB"), dtype=float)
    assert img.shape[0] > 600 and img.shape[1] > 700 and img.std() > 20  # a real picture, not a blank canvas
    h, w, _ = img.shape
    inner = img[
        int(0.3 * h) : int(0.7 * h), int(0.25 * w) : int(0.6 * w)
    ]  # inside the axes: the flow, away from the walls
    white = (inner > 200).all(axis=2).mean()
    coloured = (np.ptp(inner, axis=2) > 30).mean()  # viridis speed: not grey
    assert 0.01 < white < 0.3 and coloured > 0.5, (white, coloured)
    profiles = np.asarray(Image.open(out / "profiles.png").convert("L"), dtype=float)
    assert profiles.shape[1] > 1000 and profiles.std() > 20


def test_vtu_holds_the_solution_on_hexahedron27_cells(readme_run):
    _, out = readme_run
    m = meshio.read(out / "cavity.vtu")
    assert m.cells[0].type == "hexahedron27" and m.cells[0].data.shape == (512, 27)
    vel, p, speed, vort = (m.point_data[k] for k in ("velocity", "pressure", "speed", "vorticity"))
    assert vel.shape == (17**3, 3) and vort.shape == (17**3, 3)
    assert np.allclose(speed, np.linalg.norm(vel, axis=1))
    lid = (
        np.isclose(m.points[:, 1], 1)
        & (m.points[:, 0] > 0)
        & (m.points[:, 0] < 1)
        & (m.points[:, 2] > 0)
        & (m.points[:, 2] < 1)
    )
    assert np.allclose(vel[lid], [1, 0, 0], atol=1e-8)
    edge = np.isclose(m.points[:, 1], 1) & np.isclose(m.points[:, 0], 0)
    assert np.allclose(vel[edge], 0, atol=1e-8)  # walls win where they meet the lid
    assert abs(p.mean()) < 1.0 and np.isfinite(p).all()
    assert np.abs(vort[:, 2]).max() > 1.0  # the lid shears the flow about z


def test_profiles_are_finite_element_values(readme_run):
    _, out = readme_run
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

    def f(p):
        return np.stack([p[:, 0] * p[:, 1], p[:, 2] ** 2, p[:, 0] - p[:, 1]], axis=1)

    x = np.concatenate([f(mesh.points).T.ravel(), mesh.points[mesh.pressure_nodes] @ [1.0, -2.0, 0.5]])
    pts = np.random.default_rng(0).uniform(0, 1, (40, 3))
    vel, p = evaluate(mesh, x, *locate(mesh, pts))
    assert np.allclose(vel, f(pts), atol=1e-13) and np.allclose(p, pts @ [1.0, -2.0, 0.5], atol=1e-13)
    elem, _ = locate(mesh, np.array([[1.5, 0.5, 0.5]]))
    assert elem[0] == -1


def test_centre_line_and_mid_plane_sample_the_field():
    mesh = box_mesh(2, 1, 3, lengths=(2.0, 1.0, 1.5), origin=(-1.0, 0.0, 0.0), grading=0.5)

    def f(p):  # in the Q2 space
        return np.stack([p[:, 0] + 2 * p[:, 1], p[:, 2] ** 2, -p[:, 0] * p[:, 1]], axis=1)

    x = np.concatenate([f(mesh.points).T.ravel(), mesh.points[mesh.pressure_nodes] @ [1.0, 0.0, 3.0]])
    line = centre_line(mesh, x, 1, 5, extra_coords=[0.3, 0.5, 7.0])
    assert line["coords"].tolist() == [0.0, 0.25, 0.3, 0.5, 0.75, 1.0]  # extra points sorted in, clipped, no repeats
    assert np.allclose(line["points"][:, [0, 2]], [0.0, 0.75]) and np.allclose(line["points"][:, 1], line["coords"])
    assert np.allclose(line["velocity"], f(line["points"]), atol=1e-12) and np.allclose(line["pressure"], 2.25)
    plane = mid_plane(mesh, x, samples=7)
    assert plane["x"].tolist() == np.linspace(-1, 1, 7).tolist() and plane["z"] == 0.75
    gx, gy = np.meshgrid(plane["x"], plane["y"])
    expected = f(np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, 0.75)], axis=1)).reshape(7, 7, 3)
    assert np.allclose(plane["velocity"], expected, atol=1e-12)


def test_lid_nodes_and_continuation_steps():
    mesh = box_mesh(2)
    problem = lid_driven_problem(mesh, 100.0, "y=1")
    moving = problem.bc_nodes[problem.bc_values[:, 0] == 1.0]
    assert len(moving) == 3 * 3 and np.all(mesh.points[moving, 1] == 1.0)
    assert len(problem.bc_nodes) == mesh.n_nodes - 3**3
    assert continuation_steps("auto", 1000.0) == [400.0]
    assert continuation_steps("auto", 2500.0) == [400.0, 1000.0] and len(continuation_steps("auto", 3000.0)) == 3
    assert continuation_steps("auto", 400.0) == [] and continuation_steps("none", 1e4) == []
    assert continuation_steps("auto", 3000.0) == [400.0, 783.0, 1530.0]
    assert continuation_steps("400,100", 1000.0) == [100.0, 400.0]
    with pytest.raises(InputError, match="--continuation must be > 0 and <= 1000"):
        continuation_steps("100,2000", 1000.0)
    with pytest.raises(InputError, match="--continuation"):
        continuation_steps("fast", 1000.0)


def test_mesh_file_with_tagged_lid(tmp_path):
    p = run(
        "--mesh",
        os.path.join(MESHES, "distorted_cube_hex8.msh"),
        "--lid",
        "lid",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plots",
        "--quiet",
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["converged"]
        and summary["mesh"]["file"].endswith("distorted_cube_hex8.msh")
        and summary["mesh"]["elements"] == 216
    )


def test_refined_mesh_file_is_solved_by_multigrid(tmp_path):
    """--refine 1 of the distorted cube: auto takes mg (levels: the refined mesh and the file's),
    which converges at Re 100 in at most 4 FGMRES iterations per step."""
    p = run(
        "--mesh",
        os.path.join(MESHES, "distorted_cube_hex8.msh"),
        "--lid",
        "lid",
        "--refine",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plots",
        "--no-vtu",
        "--quiet",
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] and summary["mesh"]["elements"] == 8 * 216 and summary["mesh"]["refine"] == 1
    assert summary["options"]["linear"]["solver"] == "mg"
    assert summary["linear_iterations"] <= 4 * summary["nonlinear_steps"], summary["linear_iterations"]


def test_memory_estimate_names_the_largest_refinement_that_fits(tmp_path, capsys, monkeypatch):
    """2 GiB free on the CPU, mg with stored matrices: (245e3 + 4e3) bytes per element and 0.05 GB
    (fem3d.problems.memory) fit 8,423 elements: the 216 of the distorted cube refined once
    (1,728), not twice (13,824)."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 2**31)
    code = run_cli(
        cavity.main,
        [
            "--mesh",
            os.path.join(MESHES, "distorted_cube_hex8.msh"),
            "--lid",
            "lid",
            "--refine",
            "2",
            "--device",
            "cpu",
            "--assembly",
            "element",
            "--out",
            str(tmp_path / "out"),
        ],
        prog="fem3d.cavity",
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.rstrip().endswith("--refine 1 fits at most"), err
    assert "13,824 elements need about 3.25 GiB of host memory" in err and not (tmp_path / "out").exists()


def test_partial_assembly_fits_a_larger_mesh(tmp_path, monkeypatch, capsys):
    """1.5 GiB free on the CPU: the mg solver with stored matrices fits 6,267 elements, with
    partial assembly (130e3 + 4e3 bytes per element and 0.1 GB) 11,273: the distorted cube
    refined twice (13,824) fits neither, and the hint names the assembly (asked for, or the
    default auto's last resort)."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 1.5 * 2**30)
    for assembly in ("partial", "auto"):
        code = run_cli(
            cavity.main,
            [
                "--mesh",
                os.path.join(MESHES, "distorted_cube_hex8.msh"),
                "--lid",
                "lid",
                "--refine",
                "2",
                "--device",
                "cpu",
                "--assembly",
                assembly,
                "--out",
                str(tmp_path / "out"),
            ],
            prog="fem3d.cavity",
        )
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "GiB of host memory (partial assembly)" in err, err
        assert "13,824 elements need about 1.82 GiB" in err and err.rstrip().endswith("--refine 1 fits at most")
        assert not (tmp_path / "out").exists()


def test_auto_assembly_takes_partial_assembly_where_stored_matrices_do_not_fit(tmp_path, monkeypatch, capsys):
    """0.45 GB free on the CPU: 12^3 elements need 0.48 GB with stored matrices (249e3 bytes
    each and 0.05 GB) but 0.33 GB with partial assembly (134e3 and 0.1 GB): the default
    --assembly auto takes partial assembly and says so in one warning line."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 0.45e9)
    code = run_cli(
        cavity.main,
        [
            "--n",
            "12",
            "--re",
            "100",
            "--max-steps",
            "2",
            "--device",
            "cpu",
            "--no-plots",
            "--no-vtu",
            "--out",
            str(tmp_path),
        ],
        prog="fem3d.cavity",
    )
    err = capsys.readouterr().err
    assert code == 3 and "1,728 elements do not fit with stored element matrices: --assembly partial" in err, err
    assert json.loads((tmp_path / "summary.json").read_text())["options"]["linear"]["assembly"] == "partial"
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 0.3e9)
    assert (
        run_cli(cavity.main, ["--n", "12", "--device", "cpu", "--out", str(tmp_path / "none")], prog="fem3d.cavity")
        == 2
    )
    assert "(partial assembly), 0.279 GiB is free: --n 11 fits at most" in capsys.readouterr().err


def test_a_run_in_time_needs_its_step_vectors(tmp_path, monkeypatch, capsys):
    """0.3325 GB free on the CPU: 12^3 elements with partial assembly need 0.3316 GB steady
    (134e3 bytes each and 0.1 GB) and 0.3337 GB in time (6 more vectors of 25 unknowns per
    element: 1,200 bytes each): the steady run fits, the run in time is refused before any work."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 0.3325e9)
    cpu = get_backend("cpu")
    assert memory.check_fits(cpu, "float64", "mg", 12**3, 1, str, "partial") == "partial"
    with pytest.raises(InputError, match=r"0\.311 GiB of host memory \(partial assembly\), 0\.31 GiB is free: 1719$"):
        memory.check_fits(cpu, "float64", "mg", 12**3, 1, str, "partial", in_time=True)
    args = ["--n", "12", "--t-end", "0.1", "--dt", "0.05", "--device", "cpu", "--out", str(tmp_path / "out")]
    assert run_cli(cavity.main, args, prog="fem3d.cavity") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith("(partial assembly), 0.31 GiB is free: --n 11 fits at most")
    assert not (tmp_path / "out").exists()


def test_ranks_that_build_their_part_of_a_box_alone_need_less_host_memory(monkeypatch):
    """0.335 GB free on the CPU, 3,456 elements on 2 ranks with partial assembly: every rank
    holding the whole mesh needs 0.1 GB + 1,728 x (130e3 + 2 x 4e3) bytes = 0.3385 GB, each
    holding its part (a box) 0.1 GB + 1,728 x 134e3 = 0.3316 GB."""
    monkeypatch.setattr("gpucfd.backend.host_free_bytes", lambda: 0.335e9)
    cpu = get_backend("cpu")
    assert memory.check_fits(cpu, "float64", "mg", 3456, 2, str, "partial", whole_mesh=0.0) == "partial"
    with pytest.raises(InputError, match=r"about 0\.315 GiB of host memory per rank \(partial assembly\)"):
        memory.check_fits(cpu, "float64", "mg", 3456, 2, str, "partial")
    # a mesh refined once: its part and the eighth of it that was refined, 0.1 GB + 1,728 x (130e3 + 4e3 (2/8 + 7/8))
    # = 0.3324 GB
    assert memory.check_fits(cpu, "float64", "mg", 3456, 2, str, "partial", whole_mesh=1 / 8)


def test_the_share_of_a_mesh_that_every_rank_holds():
    """memory.host_share: a box's part alone (0); a refined mesh's part and the meshes it
    refines, whole (the distorted cube refined twice: 1,728 + 216 of 13,824 elements; the
    pipe's too, whose stretched elements one rank coarsens by their sheets: several keep its
    refinements); a mesh whose arrays are made, read whole, or solved by one rank (1)."""
    from fem3d.discretisation.mesh import read_mesh
    from fem3d.discretisation.refine import refine
    from support import sample_mesh

    distorted, pipe = (
        refine(sample_mesh("distorted"), 2),
        refine(read_mesh(os.path.join(MESHES, "pipe", "pipe.msh")), 1),
    )
    assert memory.host_share(box_mesh(4), 2) == 0.0 and memory.refined_share(0) == 1.0
    assert memory.host_share(distorted, 2) == 1944 / 13824 == memory.refined_share(2)
    assert memory.host_share(pipe, 4) == 1 / 8 == memory.refined_share(1)
    assert memory.host_share(pipe, 1) == 1.0 == memory.host_share(distorted.coarser.coarser, 2)
    distorted.cells
    assert memory.host_share(distorted, 2) == 1.0 and not pipe.built


def test_not_converged_still_writes_marked_results(tmp_path):
    p = run("--n", "2", "--max-steps", "2", "--device", "cpu", "--out", str(tmp_path), "--no-plots")
    assert p.returncode == 3 and "not converged (max_steps)" in p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] is False and summary["reason"] == "max_steps" and summary["nonlinear_steps"] == 2
    assert summary["residual"] > 1e-6
    assert (tmp_path / "cavity.vtu").exists() and (tmp_path / "profiles.csv").exists()


def test_a_flow_out_of_reach_stops_early_with_a_suggestion(tmp_path):
    """Re 1e5 on a 4^3 box without continuation (solved directly: no coarser level): Newton
    stagnates, so the run stops after 15 steps (it once spent 200 s in 5 steps of 750-1250
    FGMRES iterations) with exit 3, the reason and the advice."""
    p = run(
        "--re",
        "1e5",
        "--continuation",
        "none",
        "--n",
        "4",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plots",
        "--no-vtu",
    )
    assert p.returncode == 3 and "not converged (stagnated)" in p.stderr and "--continuation auto" in p.stderr
    assert p.stderr.count("\n") == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reason"] == "stagnated" and summary["nonlinear_steps"] == 15 and summary["linear_iterations"] <= 30


def test_no_vtu_skips_the_solution_file_and_float32_storage_is_recorded(tmp_path):
    p = run(
        "--n",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--no-plots",
        "--no-vtu",
        "--matrix-dtype",
        "float32",
        "--quiet",
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["files"] == ["solution.npy", "profiles.csv", "summary.json"] and not (tmp_path / "cavity.vtu").exists()
    )
    assert (
        summary["options"]["linear"]["matrix_dtype"] == "float32"
        and summary["converged"]
        and summary["residual"] <= 1e-6
    )


def test_restart_from_a_saved_solution(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    p = run("--n", "2", "--re", "50", "--device", "cpu", "--out", str(first), "--no-plots", "--no-vtu", "--quiet")
    assert p.returncode == 0, p.stderr
    x = np.load(first / "solution.npy")
    assert x.shape == (json.loads((first / "summary.json").read_text())["dofs"],)
    p = run(
        "--n",
        "2",
        "--re",
        "50",
        "--initial",
        str(first / "solution.npy"),
        "--continuation",
        "none",
        "--device",
        "cpu",
        "--out",
        str(second),
        "--no-plots",
        "--no-vtu",
        "--quiet",
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((second / "summary.json").read_text())
    assert summary["nonlinear_steps"] == 0 and summary["residual"] <= 1e-6  # already solved: no step
    assert np.abs(np.load(second / "solution.npy") - x).max() < 1e-6


def test_restart_file_must_match_the_mesh(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(10))
    p = run("--n", "2", "--initial", str(tmp_path / "x.npy"), "--device", "cpu", "--out", str(tmp_path), "--quiet")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--initial" in p.stderr and "expected" in p.stderr


def test_nan_stops_at_once_and_writes_marked_results(tmp_path, monkeypatch, capsys):
    import fem3d.discretisation.assembly as asm

    monkeypatch.setattr(asm, "upwind_tau", lambda xp, a, J, re, mid: xp.full(a.shape[:2] + (27,), np.nan))
    from gpucfd.errors import run_cli

    code = run_cli(
        cavity.main,
        ["--n", "2", "--device", "cpu", "--out", str(tmp_path), "--no-plots", "--quiet"],
        prog="fem3d.cavity",
    )
    assert code == 3 and "not converged (nan)" in capsys.readouterr().err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] is False and summary["reason"] == "nan" and summary["nonlinear_steps"] == 0


BAD = [
    (["--re", "0"], "--re must be > 0"),
    (["--re", "-100"], "--re must be > 0"),
    (["--n", "0"], "--n must be >= 1"),
    (["--nx", "0"], "--nx must be >= 1"),
    (["--grading", "-1"], "--grading must be >= 0"),
    (["--out", "/proc/cannot-write-here"], "--out /proc/cannot-write-here is not a writable directory"),
    (["--mesh", "MESHES/annulus_hex27.msh"], "--lid y=1: no boundary face of the mesh is on the lid"),
    (
        ["--mesh", "MESHES/annulus_hex27.msh", "--lid", "lid"],
        "boundary tag 'lid' not in the mesh (tags: ends, inner, outer)",
    ),
    (["--lid", "q=1"], "--lid q=1: the plane must read"),
    (["--mesh", "MESHES/distorted_cube_hex8.msh", "--n", "4"], "--mesh cannot be combined"),
    (["--mesh", "missing.msh"], "--mesh file not found"),
    (["--continuation", "soon"], "--continuation must be auto, none or"),
    (["--sequence", "11"], "--sequence must be >= 0 and <= 10 (got 11)"),
    (["--sequence", "soon", "--initial", "no-such.npy"], "--sequence must be auto, none or a count of coarser meshes"),
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


def test_results_are_on_disk_before_the_pictures_start(tmp_path, monkeypatch):
    """A run killed while drawing keeps its results, and summary.json lists only them; the
    run's lock on the folder goes with it."""

    def killed(run, warn, stop):
        assert sorted(os.listdir(tmp_path)) == sorted(RESULTS + [".lock"])
        raise KeyboardInterrupt

    monkeypatch.setattr(cavity, "write_pictures", killed)
    with pytest.raises(KeyboardInterrupt):
        cavity.main(["--n", "2", "--device", "cpu", "--out", str(tmp_path), "--quiet"])
    assert not (tmp_path / ".lock").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] and summary["files"] == RESULTS and summary["warnings"] == []
    assert np.load(tmp_path / "solution.npy").shape == (summary["dofs"],) == (3 * 5**3 + 3**3,)


def test_a_crashing_picture_is_one_warning_and_the_results_stay(tmp_path, monkeypatch, capsys, child_imports_tests):
    """slice.png's drawing process dies of SIGSEGV (as VTK's streamline filter did): the
    run warns in one line, keeps its complete results and profiles.png, and exits 0."""
    monkeypatch.setattr(plots, "slice_png", broken_drawings.segfault)
    monkeypatch.setattr(
        "fem3d.commands.cavity_output.mid_plane", partial(mid_plane, samples=9)
    )  # the real sampling, smaller
    code = run_cli(cavity.main, ["--n", "2", "--device", "cpu", "--out", str(tmp_path), "--quiet"], prog="fem3d.cavity")
    warning = "slice.png not written (the drawing process died of SIGSEGV)"
    assert code == 0 and capsys.readouterr().err == f"fem3d.cavity: warning: {warning}\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["converged"] and summary["files"] == RESULTS + ["profiles.png"] and summary["warnings"] == [warning]
    assert sorted(os.listdir(tmp_path)) == sorted(RESULTS + ["profiles.png"])  # no slice.png, no temporary
    assert np.load(tmp_path / "solution.npy").shape == (summary["dofs"],) == (3 * 5**3 + 3**3,)
    assert meshio.read(tmp_path / "cavity.vtu").point_data["velocity"].shape == (5**3, 3)
    rows = np.genfromtxt(tmp_path / "profiles.csv", delimiter=",", names=True, dtype=None, encoding=None)
    assert len(rows) >= 2 * PROFILE_POINTS and np.isfinite(rows["u"]).all()


def test_a_picture_whose_data_fails_is_a_warning(tmp_path, monkeypatch, capsys):
    def broken_plane(mesh, x):
        raise MemoryError("mid-plane too large")

    monkeypatch.setattr("fem3d.commands.cavity_output.mid_plane", broken_plane)
    code = run_cli(
        cavity.main,
        ["--n", "2", "--device", "cpu", "--out", str(tmp_path), "--quiet", "--max-steps", "1"],
        prog="fem3d.cavity",
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 3 and err[0] == "fem3d.cavity: warning: slice.png not written (MemoryError: mid-plane too large)"
    assert len(err) == 2 and err[1].startswith("fem3d.cavity: not converged (max_steps)")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["files"] == RESULTS + ["profiles.png"] and summary["converged"] is False


@pytest.mark.gpu
def test_cpu_and_gpu_profiles_agree(tmp_path):
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    common = ["--n", "3", "--re", "400", "--tol", "1e-11", "--forcing", "1e-12", "--no-plots", "--quiet"]
    profiles = []
    for device in ("cpu", "gpu"):
        p = run(*common, "--device", device, "--out", str(tmp_path / device))
        assert p.returncode == 0, p.stderr
        profiles.append(
            np.genfromtxt(tmp_path / device / "profiles.csv", delimiter=",", skip_header=1, usecols=(5, 6, 7))
        )
    assert np.abs(profiles[0] - profiles[1]).max() < 1e-8


def test_automatic_mesh_resolves_where_the_device_affords_it():
    from fem3d.commands import resolution

    assert resolution.expected_deviation(100.0, 8) == pytest.approx(0.0068)  # a measured point
    assert resolution.expected_deviation(1000.0, 12) == pytest.approx(0.0377)
    assert (
        resolution.expected_deviation(400.0, 12)
        < resolution.expected_deviation(1000.0, 12)
        < resolution.expected_deviation(1000.0, 8)
    )
    assert resolution.expected_deviation(2000.0, 40) > resolution.expected_deviation(1000.0, 40)  # thinner wall layers
    for re in (100.0, 400.0, 1000.0):
        n = resolution.resolving_size(re)
        assert resolution.expected_deviation(re, n) <= resolution.TARGET * resolution.MARGIN
        assert (
            n == resolution.SIZES[0]
            or resolution.expected_deviation(re, resolution.SIZES[resolution.SIZES.index(n) - 1])
            > resolution.TARGET * resolution.MARGIN
        )
    assert resolution.automatic_size(100.0, "cpu") == resolution.resolving_size(100.0) == 8  # the README's command
    cpu_1000 = resolution.automatic_size(1000.0, "cpu")
    assert cpu_1000 < resolution.resolving_size(1000.0) == resolution.automatic_size(1000.0, "gpu")
    assert resolution.estimated_seconds("cpu", 1000.0, cpu_1000) <= resolution.BUDGET_S["cpu"]
    assert resolution.automatic_size(1000.0, "gpu", ranks=4) == resolution.resolving_size(1000.0) == 24
    assert resolution.estimated_seconds("cpu", 400.0, 12, ranks=4) == resolution.estimated_seconds(
        "cpu", 400.0, 12
    )  # shared cores
    assert resolution.estimated_seconds("gpu", 400.0, 12, ranks=4) == resolution.estimated_seconds("gpu", 400.0, 12) / 4


def test_more_cpu_ranks_than_cores_are_warned_of(tmp_path):
    from test_distributed import MPIEXEC

    cores = os.cpu_count()
    if MPIEXEC is None or cores > 3:
        pytest.skip("needs mpiexec and a machine of at most 3 cores")
    p = subprocess.run(
        [
            MPIEXEC,
            "-n",
            str(cores + 1),
            sys.executable,
            "-m",
            "fem3d.cavity",
            "--n",
            "4",
            "--device",
            "cpu",
            "--max-steps",
            "1",
            "--no-plots",
            "--no-vtu",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.stderr.splitlines()[0] == (
        f"fem3d.cavity: warning: {cores + 1} ranks share this node's {cores} CPU cores: oversubscribed "
        f"ranks wait on each other and run several times slower than one rank; start at most {cores}"
    )


def test_flagship_command_on_cpu_ranks_warns_before_it_starts(tmp_path):
    """The flagship `mpirun -n 4 python -m fem3d.cavity --re 1000`, on two CPU ranks: the mesh
    the CPUs afford cannot resolve Re 1000, and the run says so (and what to run instead)
    before its first step; --n 4 keeps it short."""
    from test_distributed import MPIEXEC

    if MPIEXEC is None:
        pytest.skip("no mpiexec")
    p = subprocess.run(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            "-m",
            "fem3d.cavity",
            "--re",
            "1000",
            "--device",
            "cpu",
            "--max-steps",
            "1",
            "--no-plots",
            "--out",
            str(tmp_path / "auto"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    warning = p.stderr.splitlines()[0]
    assert warning.startswith("fem3d.cavity: warning: Re 1000 on 2 CPU ranks: ") and "--device gpu" in warning
    assert p.stdout.index("cavity Re 1000") < p.stdout.index("residual")  # printed before the first step
    p = subprocess.run(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            "-m",
            "fem3d.cavity",
            "--re",
            "1000",
            "--n",
            "4",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "n4"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    summary = json.loads((tmp_path / "n4" / "summary.json").read_text())
    assert summary["converged"] and summary["ranks"] == 2 and summary["re"] == 1000.0 and summary["residual"] <= 1e-6
    assert [s["re"] for s in summary["continuation"]] == [400.0, 1000.0]
    assert summary["accuracy"]["resolved"] is False and summary["accuracy"]["largest_deviation"]["max_abs_diff"] > 0.05
    assert "largest deviation from the published profiles:" in p.stdout and "not resolved" in p.stdout
    assert {"cavity.pvtu", "cavity_0.vtu", "cavity_1.vtu", "slice.png", "profiles.png"} <= set(
        os.listdir(tmp_path / "n4")
    )
