import math

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from fem3d.backend import cupy_module, get_backend
from fem3d.errors import InputError
from fem3d.exact import PaperFlow, TrigFlow
from fem3d.fields import l2_errors
from fem3d.mesh import box_mesh
from fem3d.navier_stokes import FlowProblem, PicardOptions, PicardSolver
from support import sample_mesh

FAST = PicardOptions(check_every=10)


def solve(case, mesh, backend, options=FAST):
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x), force=case.force)
    result = PicardSolver(problem, backend, options).solve(log=None)
    return result, l2_errors(backend, mesh, backend.asarray(result.x), case.velocity, case.pressure)


def test_manufactured_solution_converges_at_the_optimal_rates(backend):
    case = TrigFlow(10.0)
    (r4, e4), (r8, e8) = (solve(case, box_mesh(n), backend) for n in (4, 8))
    assert r4.converged and r8.converged
    rates = {f: math.log2(e4[f] / e8[f]) for f in "uvwp"}
    assert min(rates["u"], rates["v"], rates["w"]) >= 2.9 and rates["p"] >= 1.9, rates
    assert e8["u"] < 3e-4 and e8["p"] < 4e-3


def test_float32_element_matrices_keep_the_discretisation_error(backend):
    """Storing the element matrices in float32 (products summed in float64) changes the
    discrete solution by far less than its error against the exact flow."""
    case = TrigFlow(10.0)
    r64, e64 = solve(case, box_mesh(4), backend)
    r32, e32 = solve(case, box_mesh(4), backend, PicardOptions(check_every=10, matrix_dtype="float32"))
    assert r64.converged and r32.converged
    for f in "uvwp":
        assert abs(e32[f] - e64[f]) <= 1e-5 * e64[f], (f, e32[f], e64[f])
    change = np.linalg.norm(r32.x - r64.x) / np.linalg.norm(r64.x)
    assert 1e-12 < change < 1e-5, change


def test_paper_flow_on_a_distorted_mesh_is_as_accurate_as_on_the_box(backend):
    case = PaperFlow(100.0)
    r_box, e_box = solve(case, box_mesh(6), backend)
    r_dist, e_dist = solve(case, sample_mesh("distorted"), backend)
    assert r_box.converged and r_dist.converged
    for f in "uvwp":
        assert e_dist[f] < 2.0 * e_box[f]
    assert e_box["p"] < 2e-3 and e_box["u"] < 1e-4


def test_solid_body_rotation_on_curved_hex27_mesh(backend):
    """u = (-y, x, 0), p = (x^2 + y^2)/2 solves Navier-Stokes; the velocity is in the
    isoparametric Q2 space of the triquadratic annulus, the pressure is not."""
    mesh = sample_mesh("annulus")
    velocity = lambda xp, x: xp.stack([-x[..., 1], x[..., 0], 0 * x[..., 0]], axis=-1)
    pressure = lambda xp, x: 0.5 * (x[..., 0] ** 2 + x[..., 1] ** 2)
    problem = FlowProblem.with_boundary_velocity(mesh, 50.0, lambda x: velocity(np, x))
    result = PicardSolver(problem, backend, FAST).solve(log=None)
    err = l2_errors(backend, mesh, backend.asarray(result.x), velocity, pressure)
    assert result.converged and err["u"] < 1e-3 and err["w"] < 1e-5 and err["p"] < 5e-3


def test_picard_with_cg_matches_picard_with_a_direct_solver():
    """The same Picard iteration with scipy's sparse LU on the assembled matrix (pressure
    pinned, then shifted to zero mean) reaches the same discrete solution."""
    cpu = get_backend("cpu")
    case = PaperFlow(200.0)
    mesh = box_mesh(3)
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x))
    result = PicardSolver(problem, cpu, PicardOptions(tol=1e-11, cg_tol=1e-13, check_every=5)).solve(log=None)
    direct = PicardSolver(problem, cpu)
    x = direct.initial_guess()
    for _ in range(40):
        b = direct.assemble(x).copy()
        A = direct.op.to_scipy().tolil()
        k = 3 * mesh.n_nodes
        A[k, :] = 0.0
        A[k, k] = 1.0
        b[k] = 0.0
        x_new = spla.spsolve(A.tocsc(), b)
        direct.normalise_pressure(x_new)
        done = np.linalg.norm(x_new - x) < 1e-12 * np.linalg.norm(x_new)
        x = x_new
        if done:
            break
    assert result.converged and done
    assert np.linalg.norm(result.x - x) < 1e-9 * np.linalg.norm(x)


def test_stopping_reasons():
    cpu = get_backend("cpu")
    case = PaperFlow(100.0)
    mesh = box_mesh(2)
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x))
    r = PicardSolver(problem, cpu, PicardOptions(max_picard=2)).solve(log=None)
    assert not r.converged and r.reason == "max_picard" and len(r.steps) == 2
    r = PicardSolver(problem, cpu, PicardOptions(diverge=1e-6)).solve(log=None)
    assert r.reason == "diverged"
    nan_force = FlowProblem.with_boundary_velocity(mesh, 10.0, lambda x: case.velocity(np, x), force=lambda xp, x: x * np.nan)
    r = PicardSolver(nan_force, cpu).solve(log=None)
    assert r.reason == "nan" and not r.converged and len(r.steps) == 1
    lines = []
    PicardSolver(problem, cpu, PicardOptions(max_picard=1)).solve(log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("picard   1  residual") and "cg" in lines[0]


@pytest.mark.parametrize("bad", [dict(re=0.0), dict(re=-3.0), dict(re=float("nan"))])
def test_reynolds_number_must_be_positive(bad):
    with pytest.raises(InputError, match="--re must be > 0"):
        FlowProblem(box_mesh(1), bc_nodes=[], bc_values=np.zeros((0, 3)), **bad)


@pytest.mark.parametrize("bad, name", [(dict(tol=0.0), "--tol"), (dict(max_picard=0), "--max-picard"), (dict(max_cg=2.5), "--max-cg"),
                                       (dict(matrix_dtype="float16"), "--matrix-dtype")])
def test_option_ranges(bad, name):
    with pytest.raises(InputError, match=name):
        PicardOptions(**bad)


@pytest.mark.gpu
def test_cpu_and_gpu_solutions_agree():
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    case = PaperFlow(400.0)
    options = PicardOptions(tol=1e-12, cg_tol=1e-14, max_cg=20000, check_every=1)
    (r_cpu, _), (r_gpu, _) = (solve(case, box_mesh(3), get_backend(d), options) for d in ("cpu", "gpu"))
    assert r_cpu.converged and r_gpu.converged
    assert np.linalg.norm(r_gpu.x - r_cpu.x) <= 1e-10 * np.linalg.norm(r_cpu.x)
