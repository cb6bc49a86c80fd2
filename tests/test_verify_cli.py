import json
import os
import subprocess
import sys

import pytest

from fem3d import verify
from gpucfd.backend import cupy_module
from gpucfd.errors import run_cli
from fem3d.verify import add_rates, format_table


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "fem3d.verify", *args], capture_output=True, text=True, cwd=cwd)


def test_paper_case_table_and_json(tmp_path):
    out = tmp_path / "v.json"
    p = run("--case", "paper", "--n", "2", "3", "--device", "cpu", "--quiet", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "case paper, Re 100" in p.stdout and "L2 u" in p.stdout and "NOT CONVERGED" not in p.stdout
    rows = json.loads(out.read_text())["cases"]["paper"]
    assert [r["n"] for r in rows] == [2, 3] and all(r["converged"] for r in rows)
    assert rows[1]["errors"]["p"] < rows[0]["errors"]["p"] and "rates" in rows[1]


def test_not_converged_exit_code_3_with_one_line_and_marked_json(tmp_path):
    out = tmp_path / "v.json"
    p = run(
        "--case", "manufactured", "--n", "2", "3", "--max-steps", "2", "--device", "cpu", "--quiet", "--out", str(out)
    )
    assert p.returncode == 3 and "NOT CONVERGED (max_steps)" in p.stdout
    assert p.stderr == (
        f"fem3d.verify: not converged (max_steps): case manufactured N=2 (Re 10), case manufactured N=3 "
        f"(Re 10); results in {out} are marked\n"
    )
    rows = json.loads(out.read_text())["cases"]["manufactured"]
    assert [(r["n"], r["converged"], r["reason"], r["nonlinear_steps"]) for r in rows] == [
        (2, False, "max_steps", 2),
        (3, False, "max_steps", 2),
    ]


def test_json_holds_every_finished_run_when_a_later_one_fails(tmp_path, monkeypatch):
    """The results file is rewritten (atomically) after each mesh size: a crash in the
    second run keeps the first; a crash in the first leaves no file (never an empty one)."""
    solve = verify.run_case

    def failing_at_2(case, n, *args):
        if n == 3:
            raise MemoryError("N=3 does not fit")
        return solve(case, n, *args)

    monkeypatch.setattr(verify, "run_case", failing_at_2)
    out = tmp_path / "v.json"
    assert (
        run_cli(verify.main, ["--case", "paper", "--n", "2", "3", "--device", "cpu", "--quiet", "--out", str(out)]) == 2
    )
    rows = json.loads(out.read_text())["cases"]["paper"]
    assert [(r["n"], r["converged"]) for r in rows] == [(2, True)] and rows[0]["errors"]["u"] > 0
    assert os.listdir(tmp_path) == ["v.json"]
    assert (
        run_cli(
            verify.main,
            ["--case", "paper", "--n", "3", "--device", "cpu", "--quiet", "--out", str(tmp_path / "w.json")],
        )
        == 2
    )
    assert os.listdir(tmp_path) == ["v.json"]


def test_table_compares_with_paper_at_its_mesh_sizes():
    rows = [
        {
            "case": "paper",
            "n": n,
            "dofs": 1,
            "errors": dict(u=e, v=e, w=e, p=e),
            "converged": True,
            "reason": "converged",
            "nonlinear_steps": 1,
            "linear_iterations": 1,
            "seconds": 0.0,
        }
        for n, e in ((10, 1e-4), (20, 1e-3))
    ]
    add_rates(rows)
    text = format_table(rows)
    assert abs(rows[1]["rates"]["u"] + 3.3219) < 1e-3
    paper_lines = [line for line in text.splitlines() if "paper" in line]
    assert len(paper_lines) == 2 and "<=" in paper_lines[0] and ">" in paper_lines[1]


BAD = [
    (["--re", "0"], "--re must be > 0"),
    (["--re", "-2"], "--re must be > 0"),
    (["--n", "0"], "--n must be >= 1"),
    (["--n", "x"], "argument --n: invalid int value"),
    (["--device", "tpu"], "--device must be one of auto, cpu, gpu"),
    (["--case", "cavity"], "argument --case: invalid choice"),
    (["--forcing", "-1"], "--forcing must be > 0"),
    (["--tol", "1"], "--tol must be > 0 and < 1"),
    (["--solver", "lu"], "--solver must be one of"),
    (["--out", "/nonexistent-dir/v.json"], "--out /nonexistent-dir/v.json is not writable"),
]


@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    p = run(*args, cwd=tmp_path) if "--n" in args else run(*args, "--n", "1", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_gpu_requested_without_gpu(tmp_path):
    if cupy_module() is not None:
        pytest.skip("a GPU is present")
    p = run("--device", "gpu", "--n", "1", cwd=tmp_path)
    assert p.returncode == 2 and "--device gpu requested but no CUDA GPU is usable" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_verify_row_is_the_apis_solve_of_the_same_flow(tmp_path):
    """One pipeline: verify's row for the paper flow on 3^3 has the steps, the residual and
    the L2 errors of the API's solve of that flow (Flow.posed, the same options)."""
    import numpy as np

    from fem3d.discretisation.fields import l2_errors
    from fem3d.discretisation.mesh import box_mesh
    from fem3d.problems.exact import CASES
    from fem3d.problems.flow import Flow
    from fem3d.problems.navier_stokes import FlowProblem
    from fem3d.solvers.nonlinear import NonlinearOptions
    from gpucfd.backend import get_backend

    out = tmp_path / "v.json"
    assert run("--case", "paper", "--n", "3", "--device", "cpu", "--quiet", "--out", str(out)).returncode == 0
    (row,) = json.loads(out.read_text())["cases"]["paper"]
    case = CASES["paper"](100.0)

    def problem_on(mesh):
        return FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x), force=case.force)

    result = Flow.posed(box_mesh(3), case.re, problem_on).solve(device="cpu", nonlinear=NonlinearOptions(tol=1e-10))
    backend = get_backend("cpu")
    errors = l2_errors(backend, result.part.mesh, result.x_local, case.velocity, case.pressure)
    assert row["nonlinear_steps"] == len(result.steps) and row["residual"] == result.residual
    assert row["errors"] == errors
