import math

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from gpucfd.backend import cupy_module, get_backend
from gpucfd.errors import InputError
from fem3d.problems.exact import PaperFlow, TrigFlow
from fem3d.discretisation.fields import l2_errors
from fem3d.discretisation.mesh import box_mesh
from fem3d.solvers.krylov import SolveInfo
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.solvers.nonlinear import (
    DAMPED,
    LINEAR_FAILURES,
    REUSE_LIMIT,
    NonlinearOptions,
    NonlinearSolver,
    forcing_term,
    reuse_limit,
)
from gpucfd.options import build, command_line, from_table
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from support import sample_mesh


def nonlinear_solve(problem, backend, options=None, linear=None, matrix_dtype="float64", log=None):
    system = NavierStokesSystem(problem, backend, matrix_dtype=matrix_dtype)
    return NonlinearSolver(system, linear or make_linear_solver(LinearOptions().for_mesh(problem.mesh)), options).solve(
        log=log
    )


def solve(case, mesh, backend, options=None, matrix_dtype="float64"):
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x), force=case.force)
    result = nonlinear_solve(problem, backend, options, matrix_dtype=matrix_dtype)
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
    r32, e32 = solve(case, box_mesh(4), backend, NonlinearOptions(tol=1e-7), matrix_dtype="float32")
    assert r64.converged and r32.converged
    for f in "uvwp":
        assert abs(e32[f] - e64[f]) <= 1e-5 * e64[f], (f, e32[f], e64[f])
    change = np.linalg.norm(r32.x - r64.x) / np.linalg.norm(r64.x)
    assert change < 1e-5, change  # the residual is float64: Newton ends at the same solution


@pytest.mark.parametrize("assembly", ["element", "partial"])
def test_a_residual_assembled_alone_is_the_full_assemblys_and_leaves_the_operator(backend, assembly):
    """assemble(x, kind, linearise=False) gives the residual, weights and norm of
    assemble(x, kind) and leaves the operator that of the last linearisation (a Newton
    step's last residual, or a chord step's, needs no Jacobian)."""
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(sample_mesh("distorted"), case.re, lambda x: case.velocity(np, x))
    system = NavierStokesSystem(problem, backend, assembly=assembly)
    xp = system.xp
    rng = np.random.default_rng(3)
    x, y = (backend.asarray(rng.standard_normal(system.n)) for _ in range(2))
    v = backend.asarray(rng.standard_normal(system.n))
    system.assemble(x, "newton")
    before = backend.to_numpy(system.op.matvec(v, xp.empty_like(v)))
    alone = system.assemble(y, "newton", linearise=False)
    after = backend.to_numpy(system.op.matvec(v, xp.empty_like(v)))
    assert not alone.linearised and np.array_equal(before, after)
    full = system.assemble(y, "newton")
    assert full.linearised and not np.allclose(backend.to_numpy(system.op.matvec(v, xp.empty_like(v))), before)
    for a, b in ((alone.residual, full.residual), (alone.scale, full.scale)):
        np.testing.assert_allclose(backend.to_numpy(a), backend.to_numpy(b), rtol=1e-12, atol=1e-14)
    assert alone.norm == pytest.approx(full.norm, rel=1e-12)


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

    def velocity(xp, x):
        return xp.stack([-x[..., 1], x[..., 0], 0 * x[..., 0]], axis=-1)

    def pressure(xp, x):
        return 0.5 * (x[..., 0] ** 2 + x[..., 1] ** 2)

    problem = FlowProblem.with_boundary_velocity(mesh, 50.0, lambda x: velocity(np, x))
    result = nonlinear_solve(problem, backend)
    err = l2_errors(backend, mesh, backend.asarray(result.x), velocity, pressure)
    assert result.converged and err["u"] < 1e-3 and err["w"] < 1e-5 and err["p"] < 5e-3


def test_newton_krylov_matches_newton_with_a_direct_solver():
    """The same equations solved by Newton's method with scipy's sparse LU on the assembled
    Jacobian (pressure pinned, then shifted to zero mean) give the same discrete solution,
    and Newton converges quadratically: each residual about the square of the last."""
    cpu = get_backend("cpu")
    case = PaperFlow(200.0)
    mesh = box_mesh(3)
    problem = FlowProblem.with_boundary_velocity(mesh, case.re, lambda x: case.velocity(np, x))
    result = nonlinear_solve(problem, cpu, NonlinearOptions(tol=1e-12, forcing=1e-10))
    direct = NavierStokesSystem(problem, cpu)
    x = direct.initial_guess()
    residuals = []
    for _ in range(10):
        state = direct.assemble(x, "newton")
        residuals.append(state.norm)
        if state.norm < 1e-12:
            break
        J = direct.op.to_scipy().tolil()
        k = 3 * mesh.n_nodes
        J[k, :] = 0.0
        J[k, k] = 1.0
        rhs = -state.residual
        rhs[k] = 0.0
        x = x + spla.spsolve(J.tocsc(), rhs)
        direct.normalise_pressure(x)
    assert result.converged and residuals[-1] < 1e-12
    assert np.linalg.norm(result.x - x) < 1e-9 * np.linalg.norm(x)
    r = [s.residual for s in result.steps] + [result.residual]
    assert len(r) <= 10 and r[-4] < 1e-2
    for prev, new in zip(r[-4:-1], r[-3:]):
        assert new < 50.0 * prev**2, r  # quadratic: the digits double


class FakeLinear:
    """A linear solver that returns a chosen step and reports a chosen relative residual."""

    name = "fake"
    forcing = 0.1
    rebuild_after = None

    def __init__(self, step, relres=0.5, reason="converged"):
        self.step, self.relres, self.reason = step, relres, reason

    def setup(self, system, state, rebuild=True):
        pass

    def solve(self, rhs, x, rtol, max_iterations=None):
        x[...] = self.step(rhs)
        return SolveInfo(3, self.reason, self.relres)


class ScriptedLinear(FakeLinear):
    """A linear solver that keeps its preconditioner (rebuild_after 3) and reports the
    scripted iteration counts and reasons (and relative residuals) in turn, recording each setup's ``rebuild`` and
    each solve's iteration limit and whether it starts from zero."""

    rebuild_after = 3

    def __init__(self, outcomes):
        super().__init__(lambda rhs: -0.5 * rhs)
        self.outcomes, self.calls = list(outcomes), []

    def setup(self, system, state, rebuild=True):
        self.calls.append(("setup", rebuild))

    def solve(self, rhs, x, rtol, max_iterations=None):
        self.calls.append(("solve", max_iterations, not np.any(x)))
        iterations, reason, *relres = self.outcomes.pop(0)
        x[...] = self.step(rhs)
        return SolveInfo(iterations, reason, relres[0] if relres else 0.5 if reason == "converged" else 0.9)


def test_preconditioner_is_kept_while_solves_are_short_and_rebuilt_when_a_kept_one_fails():
    """rebuild_after 3: a solve of 2 iterations keeps the preconditioner for the next step
    (whose solve may take REUSE_LIMIT * 3 iterations or more: reuse_limit), one of 5 rebuilds it, and a solve
    that fails with a kept preconditioner goes on with a new one; the step
    counts both solves' iterations and records whether it built its preconditioner."""
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(2), case.re, lambda x: case.velocity(np, x))
    linear = ScriptedLinear(
        [(2, "converged"), (5, "converged"), (1, "converged"), (12, "max_iterations"), (4, "converged")]
    )
    r = nonlinear_solve(problem, get_backend("cpu"), NonlinearOptions(max_steps=4, newton=0.0, anderson=0), linear)
    keep = [reuse_limit(SolveInfo(n, "converged", 0.5), s.forcing, 3) for n, s in ((2, r.steps[1]), (1, r.steps[3]))]
    assert [c[:3] for c in linear.calls] == [
        ("setup", True),
        ("solve", None, True),
        ("setup", False),
        ("solve", keep[0], True),
        ("setup", True),
        ("solve", None, True),
        ("setup", False),
        ("solve", keep[1], True),
        ("setup", True),
        ("solve", None, False),
    ]
    assert [(s.linear_iterations, s.rebuilt) for s in r.steps] == [(2, True), (5, False), (1, True), (16, True)]


def test_a_preconditioner_is_rebuilt_once_a_solve_with_it_reduces_less_per_iteration_than_when_new():
    """A preconditioner whose best solve took 2 iterations to 1e-2 (1 digit each) is kept
    while its solves reduce 2/3 of a digit per iteration or more (3 to 1e-2), and rebuilt
    after one that reduced less (3 to 2e-2: 0.57 digit each); the solves after the rebuild
    are the new measure."""
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(2), case.re, lambda x: case.velocity(np, x))
    outcomes = [(2, "converged", 1e-2), (3, "converged", 1e-2), (3, "converged", 2e-2), (2, "converged", 1e-1)]
    linear = ScriptedLinear(outcomes + [(3, "converged", 2e-1), (1, "converged", 0.5)])
    r = nonlinear_solve(problem, get_backend("cpu"), NonlinearOptions(max_steps=6, newton=0.0, anderson=0), linear)
    assert [c[1] for c in linear.calls if c[0] == "setup"] == [True, False, False, True, False, True]
    assert [s.rebuilt for s in r.steps] == [True, False, False, True, False, True]


def test_a_kept_preconditioner_is_given_the_iterations_of_the_last_solves_rate_at_its_tolerance():
    """A time step's second Newton step took 1 iteration to 0.098 of its right-hand side; the
    next step's first solve, asked for 4e-5, needs 5 at that rate (a 2D-3 step took 6 with
    the preconditioner it kept) and is given REUSE_LIMIT times as many, not REUSE_LIMIT
    times 1; a solve that reduced nothing, or a tolerance of 1, counts its iterations."""
    assert reuse_limit(SolveInfo(1, "converged", 0.098), 4e-5, 0) == REUSE_LIMIT * 5
    assert reuse_limit(SolveInfo(2, "converged", 1.3e-2), 4e-5, 0) == REUSE_LIMIT * 5
    assert reuse_limit(SolveInfo(4, "converged", 1e-4), 1e-4, 0) == REUSE_LIMIT * 4
    assert reuse_limit(SolveInfo(6, "converged", 1e-4), 0.1, 3) == REUSE_LIMIT * 3
    assert reuse_limit(SolveInfo(7, "max_iterations", 1.0), 1e-3, 0) == REUSE_LIMIT * 7
    assert reuse_limit(SolveInfo(0, "converged", 0.0), 1e-3, 0) == REUSE_LIMIT


def test_a_close_guess_asks_the_tolerance_or_newtons_remainder_of_its_first_solve():
    """From a guess close to the solution with a carried solve (a time step's), the first
    linear solve is asked for half the tolerance over |F| and one Newton step converges;
    given a remainder C whose C |F|^2 exceeds half the tolerance, it is asked for C |F|
    instead, and the second step, whose chord remainder C |F_prev| |F| lies below half the
    tolerance, keeps the first one's Jacobian (neither assembles one at its result). The
    result's remainder is the largest (|F_new| - relres |F|) / |F|^2 of its Newton steps."""
    case = PaperFlow(200.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(6), case.re, lambda x: case.velocity(np, x))
    system = NavierStokesSystem(problem, get_backend("cpu"))
    options = NonlinearOptions(tol=1e-10)
    solver = NonlinearSolver(system, make_linear_solver(LinearOptions(solver="mg")), options)
    solved = solver.solve()
    assert solved.converged
    close = solved.x * (1.0 + 1e-6 * np.sin(np.arange(solved.x.size)))
    one = solver.solve(x0=close, carried=solved.last_solve)
    first = one.steps[0]
    assert one.converged and len(one.steps) == 1 and first.residual < 1e-5
    assert first.forcing == pytest.approx(0.5 * options.tol / first.residual, rel=1e-12)
    assert one.remainder == pytest.approx(remainder_bound(one), rel=1e-12)
    assert one.remainder * first.residual**2 < 0.5 * options.tol
    c = 20 * options.tol / first.residual**2  # C |F|^2 = 20 tol, C |F| below the largest tolerance
    two = solver.solve(x0=close, carried=solved.last_solve, remainder=c)
    assert two.converged and len(two.steps) == 2 and all(s.step_length == 1.0 for s in two.steps)
    assert [(s.chord, s.rebuilt) for s in two.steps] == [(False, False), (True, False)]
    kept = system.elements.mats.copy()  # both steps' results were evaluated alone: J of the guess is stored
    guess = close.copy()
    system.impose_boundary_values(guess)
    system.assemble(guess, "newton")
    assert np.array_equal(system.elements.mats, kept)
    assert two.steps[0].forcing == pytest.approx(c * first.residual, rel=1e-12)
    assert two.remainder == pytest.approx(remainder_bound(two), rel=1e-12)


def remainder_bound(result) -> float:
    """The largest (|F_new| - relres |F|) / |F|^2 over the Newton steps of ``result`` (not its chord steps)."""
    norms = [s.residual for s in result.steps] + [result.residual]
    return max(
        max(new - s.linear_relres * old, 0.0) / old**2
        for s, old, new in zip(result.steps, norms, norms[1:])
        if not s.chord
    )


def test_preconditioner_is_kept_after_a_newton_step_that_cut_the_residual_by_the_keep_factor():
    """mg keeps its preconditioner only for Newton steps that follow a Newton step which
    cut the residual tenfold or more, giving such a solve at most reuse_limit's
    iterations; it reaches the same solution as with a new preconditioner
    every step (keep_factor inf), and the paper solver, which cannot keep one, builds its
    own every step."""
    from fem3d.solvers.linear import MultigridSolver

    class Recording(MultigridSolver):
        def __init__(self, options):
            super().__init__(options)
            self.limits = []

        def solve(self, rhs, x, rtol, max_iterations=None):
            self.limits.append(max_iterations)
            return super().solve(rhs, x, rtol, max_iterations)

    case = PaperFlow(200.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(4), case.re, lambda x: case.velocity(np, x))
    cpu = get_backend("cpu")
    results = {}
    for factor in (10.0, math.inf):
        linear = Recording(LinearOptions(solver="mg"))
        r = nonlinear_solve(problem, cpu, NonlinearOptions(tol=1e-10, keep_factor=factor), linear)
        assert r.converged
        fast = [False] + [
            a.kind == b.kind == "newton" and a.residual >= factor * b.residual for a, b in zip(r.steps, r.steps[1:])
        ]
        kept = [not s.rebuilt for s in r.steps]
        assert all(f for k, f in zip(kept, fast) if k)  # kept only after a fast step (and while not aged)
        assert linear.limits == [
            reuse_limit(SolveInfo(a.linear_iterations, a.linear_reason, a.linear_relres), b.forcing, 0) if k else None
            for a, b, k in zip([None] + r.steps, r.steps, kept)
        ]
        results[factor] = r
    assert sum(not s.rebuilt for s in results[10.0].steps) >= 1 and all(s.rebuilt for s in results[math.inf].steps)
    assert np.linalg.norm(results[10.0].x - results[math.inf].x) < 1e-8 * np.linalg.norm(results[math.inf].x)
    paper = nonlinear_solve(
        problem, cpu, NonlinearOptions(tol=1e-10, keep_factor=1.0), make_linear_solver(LinearOptions(solver="paper"))
    )
    assert paper.converged and all(s.rebuilt for s in paper.steps)


def test_forcing_term_follows_eisenstat_walker_within_its_bounds():
    assert forcing_term(0.1, 0.02, 0.1, 0.5, 1e-8) == pytest.approx(0.9 * 0.2**2)  # choice 2: 0.9 (|F_k| / |F_k-1|)^2
    assert forcing_term(0.5, 1e-3, 0.1, 0.9, 1e-8) == pytest.approx(
        0.9 * 0.5**2
    )  # safeguard: 0.9 eta^2 > 0.1 keeps eta up
    assert forcing_term(0.1, 0.09, 0.1, 0.1, 1e-8) == 0.1  # never looser than the solver's largest
    assert forcing_term(0.1, 1e-6, 1e-3, 0.9, 1e-6) == pytest.approx(
        0.5
    )  # 0.5 tol / |F| suffices for the last step ...
    assert forcing_term(0.1, 1e-6, 1e-3, 0.01, 1e-6) == 0.01  # ... within the largest


def test_steps_record_the_forcing_they_were_given():
    """The first step gets the linear solver's largest forcing, later ones forcing_term of the
    recorded residuals."""
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(2), case.re, lambda x: case.velocity(np, x))
    result = nonlinear_solve(
        problem,
        get_backend("cpu"),
        NonlinearOptions(tol=1e-10),
        linear=make_linear_solver(LinearOptions(solver="paper")),
    )
    steps = result.steps
    assert result.converged and len(steps) >= 3 and steps[0].forcing == 0.01  # the paper solver's largest
    for prev, step in zip(steps, steps[1:]):
        assert step.forcing == forcing_term(prev.forcing, step.residual, prev.residual, 0.01, 1e-10)
        assert step.linear_relres <= step.forcing


def test_stopping_reasons():
    """Converged means solved: the loop ends on a small residual of the equations, and stops
    at once on NaN, divergence, stagnation or a failed linear solve."""
    cpu = get_backend("cpu")
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(2), case.re, lambda x: case.velocity(np, x))
    r = nonlinear_solve(problem, cpu, NonlinearOptions(max_steps=2))
    assert not r.converged and r.reason == "max_steps" and len(r.steps) == 2 and r.residual > 1e-8
    picard = NonlinearOptions(newton=0.0, anderson=0)
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: 1e8 * rhs))
    assert r.reason == "diverged" and len(r.steps) == 1
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: rhs * np.nan))
    assert r.reason == "nan" and len(r.steps) == 1
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: 0 * rhs))
    assert r.reason == "stagnated" and len(r.steps) == NonlinearOptions().stagnation
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: rhs, relres=1.0))
    assert r.reason == "linear_solver" and len(r.steps) == 1 and not r.converged
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: rhs, reason="breakdown", relres=1.0))
    assert r.reason == "linear_solver" and len(r.steps) == 1
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: 0 * rhs, relres=0.1))
    assert r.reason == "stagnated"  # steps that do not reduce the residual
    r = nonlinear_solve(problem, cpu, picard, FakeLinear(lambda rhs: 0.5 * rhs, reason="max_iterations", relres=0.5))
    assert (
        r.reason == "linear_solver" and len(r.steps) == LINEAR_FAILURES
    )  # linear solves short of their tolerance in a row
    nan_force = FlowProblem.with_boundary_velocity(
        box_mesh(2), 10.0, lambda x: case.velocity(np, x), force=lambda xp, x: x * np.nan
    )
    r = nonlinear_solve(nan_force, cpu)
    assert r.reason == "nan" and not r.converged and len(r.steps) == 0
    lines = []
    nonlinear_solve(problem, cpu, NonlinearOptions(max_steps=1, newton=0.0), log=lines.append)
    assert (
        len(lines) == 1 and lines[0].startswith("picard   1  residual") and "fgmres     1 it" in lines[0]
    )  # the direct solve


class Overshooting:
    """The direct linear solver with its step multiplied by 5: the line search takes 1/4 of
    it (1.25 Newton steps) or less, so every Newton step is damped, and it cuts the residual
    by about 4."""

    def __init__(self, mesh):
        self.inner = make_linear_solver(LinearOptions().for_mesh(mesh))
        self.name, self.forcing, self.rebuild_after = "overshooting", self.inner.forcing, None

    def setup(self, system, state, rebuild=True):
        self.inner.setup(system, state, rebuild)

    def solve(self, rhs, x, rtol, max_iterations=None):
        info = self.inner.solve(rhs, x, 1e-12)
        x *= 5.0
        return info


def test_damped_steps_in_a_row_stop_the_iteration_only_where_asked():
    """NonlinearOptions.damped: a run of Newton steps shortened to DAMPED or less ends the
    iteration as stagnated although the residual falls (a continuation stage that can be
    split gives up so); by default such steps go on to convergence."""
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(2), case.re, lambda x: case.velocity(np, x))
    cpu = get_backend("cpu")
    r = nonlinear_solve(problem, cpu, NonlinearOptions(damped=3), Overshooting(problem.mesh))
    assert r.reason == "stagnated" and len(r.steps) == 3
    assert all(s.step_length <= DAMPED for s in r.steps) and r.residual < 0.3 * r.steps[0].residual
    r = nonlinear_solve(problem, cpu, NonlinearOptions(), Overshooting(problem.mesh))
    assert r.converged and len(r.steps) > 3 and all(s.step_length <= DAMPED for s in r.steps)


@pytest.mark.parametrize(
    "bad", [dict(re=0.0), dict(re=-3.0), dict(re=float("nan")), dict(re=float("inf")), dict(re=1e300)]
)
def test_reynolds_number_must_be_positive_and_bounded(bad):
    with pytest.raises(InputError, match="--re must be > 0 and <= 100000"):
        FlowProblem(box_mesh(1), bc_nodes=[], bc_values=np.zeros((0, 3)), **bad)


def test_prescribed_nodes_must_not_repeat():
    """A node given twice would have two prescribed values: an input error, not the last one silently."""
    with pytest.raises(InputError, match="bc_nodes must not repeat a node"):
        FlowProblem(box_mesh(1), 100.0, bc_nodes=[0, 5, 0], bc_values=np.zeros((3, 3)))


@pytest.mark.parametrize(
    "bad, name",
    [
        (dict(tol=0.0), "tol="),
        (dict(tol=1.0), "tol="),
        (dict(max_steps=0), "max_steps="),
        (dict(forcing=1.0), "forcing="),
        (dict(forcing=0.0), "forcing="),
        (dict(newton=float("nan")), "newton="),
        (dict(anderson=-1), "anderson="),
        (dict(keep_factor=0.5), "keep_factor="),
        (dict(keep_factor=float("nan")), "keep_factor="),
    ],
)
def test_nonlinear_option_ranges(bad, name):
    with pytest.raises(InputError, match=name):
        NonlinearOptions(**bad)


@pytest.mark.parametrize(
    "bad, name",
    [
        (dict(solver="lu"), "solver="),
        (dict(max_iterations=2.5), "max_iterations="),
        (dict(check_every=0), "check_every="),
    ],
)
def test_linear_option_ranges(bad, name):
    with pytest.raises(InputError, match=name):
        LinearOptions(**bad)


def test_matrix_storage_must_be_known():
    case = PaperFlow(100.0)
    problem = FlowProblem.with_boundary_velocity(box_mesh(1), case.re, lambda x: case.velocity(np, x))
    with pytest.raises(InputError, match="--matrix-dtype must be one of float64, float32"):
        NavierStokesSystem(problem, get_backend("cpu"), matrix_dtype="float16")
    with pytest.raises(InputError, match="matrix_dtype= must be one of float64, float32"):
        LinearOptions(matrix_dtype="half")
    with pytest.raises(InputError, match="--matrix-dtype must be one of float64, float32 \\(got 'half'\\)"):
        build(LinearOptions, {"matrix_dtype": "half"}, command_line)
    with pytest.raises(InputError, match="\\[solver\\] max_linear must be >= 1"):
        from_table(LinearOptions, {"max_linear": 0}, "solver", set())


@pytest.mark.gpu
def test_cpu_and_gpu_solutions_agree():
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    case = PaperFlow(400.0)
    options = NonlinearOptions(tol=1e-12, forcing=1e-10)
    (r_cpu, _), (r_gpu, _) = (solve(case, box_mesh(3), get_backend(d), options) for d in ("cpu", "gpu"))
    assert r_cpu.converged and r_gpu.converged
    assert np.linalg.norm(r_gpu.x - r_cpu.x) <= 1e-10 * np.linalg.norm(r_cpu.x)
