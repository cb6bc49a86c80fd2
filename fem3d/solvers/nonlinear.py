"""Nonlinear solution of F(x) = 0 (fem3d.problems.navier_stokes.NavierStokesSystem): Picard and
Newton steps, line search, stopping rules, and continuation in the Reynolds number.

Each step linearises about the iterate x (the Picard matrix A(x), Kao & Sheu's method,
or the exact Jacobian J(x)), solves M dx = -F(x) inexactly with a linear solver object
(fem3d.solvers.linear: its residual falls by the forcing factor eta, at most ``forcing``;
after the first step eta follows Eisenstat & Walker 1996, choice 2: loose while the
residual falls slowly, tight once Newton converges fast), and moves to x + dx:
Newton steps by a backtracking line search on the residual norm (Armijo), Picard steps
through Anderson mixing (fem3d.solvers.anderson; depth 0 is the paper's plain Picard).
A linear solver that can keep its preconditioner (fem3d.solvers.linear: mg) keeps it for a
Newton step that follows a Newton step which cut the residual by ``keep_factor`` or
more: Newton then converges fast, so the iterate, and with it the Jacobian, hardly
changes (PETSc's lagged preconditioner, decided by the convergence instead of a fixed
lag). A Newton step expected to converge, or to be followed by a chord step (the Jacobian
kept too, where its change is expected to cost less than half the tolerance), evaluates its
result's residual alone, without the Jacobian's assembly.

Converged means solved: the relative residual of the equations ||D F(x)|| / ||D b(x)||
(rows weighted by their norms, fem3d.problems.navier_stokes.Linearisation) is at most ``tol``.
The iteration stops at once on NaN or infinity, when the residual grows past
``diverge`` times its first value, when it has not fallen below 0.9 times its best for
``stagnation`` steps or the line search shortened ``damped`` Newton steps in a row to
DAMPED or less (where asked), when a linear solve failed (NaN, or its residual not
reduced), or when the linear solves of LINEAR_FAILURES steps in a row ended short of
their tolerance (reason "linear_solver" for both: the linearisations are out of the
linear solver's reach, as at a Reynolds number far above what this start and mesh allow).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .anderson import Anderson
from .krylov import SolveInfo
from gpucfd.errors import InputError, check_range
from gpucfd.options import setting, validate

MIN_STEP = 1.0 / 64  # smallest line-search step length
ARMIJO = 1e-4
MAX_STAGES = 12  # longest continuation plan
CONTINUATION_START = 400.0  # "auto" continuation: first Reynolds number above which it starts
CONTINUATION_FACTOR = 2.5  # "auto" continuation: largest ratio of consecutive Reynolds numbers
CONTINUATION_TOL = 1e-4  # residual tolerance of the intermediate Reynolds numbers
EW_GAMMA = 0.9  # Eisenstat-Walker choice 2: eta = EW_GAMMA (|F_k| / |F_k-1|)^2
EW_SAFEGUARD = 0.1  # ... and at least EW_GAMMA eta_k-1^2 when that exceeds this
OUT_OF_REACH = ("linear_solver", "stagnated", "diverged")  # stop reasons that say the flow is out of Newton's reach
BACKOFFS = 2  # continuation stages split after one stopped out of reach, at most, in a run (docs/solvers.md)
SPLIT_STAGNATION = 6  # stagnation steps of a stage that can still be split: longer than a converging stage's plateau
SPLIT_DAMPED = 3  # Newton steps in a row shortened to DAMPED or less that stop a stage that can still be split
DAMPED = 0.25  # line-search step length at or below which a Newton step counts as damped
LINEAR_FAILURES = 2  # steps in a row whose linear solve ended unconverged that stop the iteration
REUSE_LIMIT = 4  # a solve with a kept preconditioner stops after this many times the iterations that the solve
# before it would take to its tolerance (reuse_limit; at least this many times the solver's rebuild_after)
AGED = 1.5  # a kept preconditioner is rebuilt once a solve with it reduced the residual by fewer digits per
# iteration than 1 / AGED of the most that a solve with it reached (docs/solvers.md)
KEEP_FACTOR = 10.0  # keep the preconditioner after a Newton step that cut the residual by this factor or more: the
# Jacobian then hardly changes (docs/solvers.md)


def forcing_term(previous_eta: float, norm: float, previous_norm: float, largest: float, tol: float) -> float:
    """Relative tolerance of the next linear solve (Eisenstat & Walker 1996, choice 2, with
    their safeguard), at most ``largest`` and at least 0.5 tol / |F| (a last step need
    only reach the nonlinear tolerance ``tol``)."""
    eta = EW_GAMMA * (norm / previous_norm) ** 2
    if EW_GAMMA * previous_eta**2 > EW_SAFEGUARD:
        eta = max(eta, EW_GAMMA * previous_eta**2)
    return min(largest, max(eta, 0.5 * tol / norm))


def reuse_limit(last: SolveInfo, eta: float, rebuild_after: int) -> int:
    """The iterations a solve to the relative tolerance ``eta`` with a kept preconditioner is
    given: REUSE_LIMIT times those the ``last`` solve's mean reduction per iteration takes to
    eta (its iterations where it reduced nothing), at least REUSE_LIMIT rebuild_after. The
    solve before may have been asked for far less (a time step's second Newton step, one
    iteration to 0.1, before the next step's first asks for 1e-5): its rate, not its count,
    says what the preconditioner does."""
    its = last.iterations
    rate = digits_per_iteration(last) if its else 0.0
    if rate > 0.0 and eta < 1.0:
        its = math.ceil(-math.log10(eta) / rate - 1e-9)
    return REUSE_LIMIT * max(its, rebuild_after, 1)


def digits_per_iteration(info: SolveInfo) -> float:
    """The mean reduction of a solve's relative residual per iteration, in digits (0 where
    it reduced nothing; ``info`` with at least one iteration)."""
    return -math.log10(min(max(info.relres, 1e-300), 1.0)) / info.iterations


def out_of_reach_hint(reason: str, continuation: str, finer: str) -> str:
    """The advice for a run that stopped for ``reason`` ('' unless it is one of OUT_OF_REACH);
    ``continuation`` and ``finer`` name the command's ways to solve lower Reynolds numbers
    first and to take a finer mesh."""
    if reason not in OUT_OF_REACH:
        return ""
    return (
        f"; Newton cannot reach this flow from its start on this mesh: solve lower Reynolds numbers first "
        f"({continuation}) or {finer}"
    )


@dataclass
class NonlinearOptions:
    """tol: relative residual that ends the solve; max_steps: step limit; newton: take Newton
    steps once the relative residual is below this (0: Picard only, the paper's method;
    inf: Newton from the start); anderson, relax: depth and damping of the Anderson
    mixing of Picard steps; forcing: each linear solve reduces its residual by this factor
    or more (:func:`forcing_term`; None: the linear solver's ``forcing``, the largest that
    suits its Krylov method); keep_factor: a linear solver that can keep its preconditioner
    keeps it after a Newton step that cut the residual by this factor or more (inf: never);
    diverge: stop when the residual exceeds this factor times its first value;
    stagnation: stop after this many steps without a 10 % improvement of the best residual;
    damped: stop (stagnated) after this many Newton steps in a row whose line search shortened
    them to DAMPED or less: the iterate is outside Newton's basin (0: never)."""

    tol: float = setting(
        1e-8,
        "relative residual of the equations that ends the solve, in (0, 1)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    )
    max_steps: int = setting(30, "limit of nonlinear steps", low=1, high=100000, integer=True)
    newton: float = setting(
        math.inf,
        "take Newton steps once the relative residual is below this; 0 for Picard only (the paper's method), inf for "
        "Newton from the start",
        low=0,
        infinite=True,
    )
    anderson: int = setting(
        5, "Anderson mixing depth of Picard steps, 0 for plain Picard", low=0, high=50, integer=True
    )
    relax: float = setting(1.0, "Picard damping in (0, 1]", low=0, high=1, low_open=True)
    forcing: float | None = setting(
        None,
        "inexact steps: each linear solve reduces its residual by this factor or more (after the first step by the "
        "Eisenstat-Walker rule), in (0, 1); not given: 0.1 with --solver mg, 0.01 with paper",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        optional=True,
    )
    keep_factor: float = setting(
        KEEP_FACTOR,
        "mg solver: keep the preconditioner for the next Newton step when the last Newton step cut the residual by "
        "at least this factor, >= 1; inf builds a new one every step",
        low=1,
        infinite=True,
    )
    diverge: float = setting(
        1e6, "stop when the residual exceeds this factor times its first value, > 1", low=1, low_open=True
    )
    stagnation: int = setting(
        15, "stop after this many steps without a 10 %% improvement of the best residual", low=1, integer=True
    )
    damped: int = setting(
        0,
        f"stop after this many Newton steps in a row whose line search shortened them to {DAMPED} or less; 0 never",
        low=0,
        integer=True,
    )

    def __post_init__(self):
        validate(self)


KEPT = {  # Step.line's note of what a step kept, by (chord, rebuilt)
    (False, True): "",
    (False, False): ", kept preconditioner",
    (True, False): ", kept Jacobian and preconditioner",
    (True, True): ", kept Jacobian",
}


@dataclass
class Step:
    """One nonlinear step: the residual at its start, the linear solve, the step length."""

    step: int
    kind: str  # "picard" or "newton"
    residual: float  # relative residual of the equations at the start of the step
    linear_iterations: int
    linear_reason: str
    linear_relres: float
    step_length: float  # line-search factor (1 for Picard steps)
    seconds: float
    forcing: float  # relative tolerance the linear solve was given
    rebuilt: bool = True  # the linear solver built its preconditioner for this step (False: kept an earlier one)
    chord: bool = False  # the step kept the last Newton step's Jacobian too (NonlinearSolver._chord_suffices)

    def line(self, solver: str, stopped: bool = False) -> str:
        """The progress line of this step (``solver``: the linear solver's name); ``stopped``: the
        step ended the iteration after its linear solve."""
        head = (
            f"{self.kind:6s} {self.step:3d}  residual {self.residual:.3e}  {solver} {self.linear_iterations:5d} it "
            f"({self.linear_reason}, relres {self.linear_relres:.1e} of {self.forcing:.0e}"
            f"{KEPT[(self.chord, self.rebuilt)]})"
        )
        if stopped:
            return head + ": stopped"
        return head + (f"  step {self.step_length:.3g}" if self.kind == "newton" else "") + f"  {self.seconds:7.2f} s"


@dataclass
class NonlinearResult:
    x: np.ndarray  # last iterate on the host, layout [u | v | w | p]
    converged: bool
    reason: str  # converged, max_steps, diverged, stagnated, nan, linear_solver, interrupted
    residual: float  # relative residual of the equations at x
    steps: list = field(default_factory=list)
    last_solve: SolveInfo | None = None  # the last linear solve (a later solve may keep its preconditioner)
    remainder: float | None = None  # Newton's quadratic remainder over |F|^2: the largest lower bound its full
    # Newton steps gave (None: none was taken)

    @property
    def linear_iterations(self) -> int:
        return sum(s.linear_iterations for s in self.steps)


class NonlinearSolver:
    """Picard/Newton iteration for a NavierStokesSystem with a linear solver object
    (``setup(system, linearisation)``, ``solve(rhs, dx, rtol) -> fem3d.solvers.krylov.SolveInfo``).
    ``check_interrupt()`` (fem3d.parallel.interrupt) is called once per step on every rank."""

    def __init__(self, system, linear, options: NonlinearOptions | None = None, check_interrupt=None):
        self.system = system
        self.linear = linear
        self.options = options or NonlinearOptions()
        self.check_interrupt = check_interrupt or (lambda: None)
        self.best = None  # the most digits per iteration a solve with the present preconditioner reached

    def solve(
        self, x0=None, log=None, carried: SolveInfo | None = None, remainder: float | None = None
    ) -> NonlinearResult:
        """Iterate from ``x0`` (this rank's vector; default: the system's initial guess);
        ``log(line)`` receives one line per step. ``carried``: the last linear solve of a solve
        of nearly the same equations just before (the time step before), whose preconditioner
        the first Newton step keeps as it would after a fast Newton step (not with keep_factor
        inf), and whose first linear tolerance is 0.5 tol / |F| (at most the largest): from a
        guess this close, Newton's quadratic remainder mostly lies below tol, so one step with
        the linear residual below it converges. ``remainder``: that solve's
        NonlinearResult.remainder C; where C |F|^2 exceeds 0.5 tol, the first linear solve is
        asked for C |F| instead (no closer than the step's own remainder: a second step
        follows; docs/time.md). An interrupt (fem3d.parallel.interrupt.Interrupted) leaves as
        the result's reason "interrupted", with the last iterate."""
        from ..parallel.interrupt import Interrupted

        system, opt = self.system, self.options
        dist = system.dist
        log = log or (lambda line: None)
        x = system.initial_guess() if x0 is None else system.xp.array(x0, dtype=np.float64)  # a copy
        system.impose_boundary_values(x)
        newton = opt.newton == math.inf
        state = system.assemble(x, "newton" if newton else "picard")
        first, best, since_best, damped = state.norm, state.norm, 0, 0
        mixer = Anderson(opt.anderson, opt.relax, dist.dot)
        steps, reason = [], "max_steps"
        largest = self.linear.forcing if opt.forcing is None else opt.forcing
        carried = carried if opt.keep_factor < math.inf else None
        eta, previous_norm, last, failures, measured = largest, None, carried, 0, None
        try:
            for k in range(1, opt.max_steps + 1):
                reason = self._stop_reason(state.norm, first, since_best, damped)
                if reason:
                    break
                self.check_interrupt()
                t0 = time.perf_counter()
                fast = (
                    bool(steps)
                    and steps[-1].kind == state.kind == "newton"
                    and previous_norm >= opt.keep_factor * state.norm
                ) or (not steps and carried is not None and state.kind == "newton")
                bound = remainder if measured is None else measured  # Newton's remainder C, where known
                chord = (
                    not state.linearised
                    and fast
                    and not steps[-1].chord  # the Jacobian kept is that of the step before
                    and self._chord_suffices(bound, previous_norm, state.norm)
                )
                if not (state.linearised or chord):
                    state = system.assemble(x, state.kind)
                if previous_norm is not None:
                    eta = forcing_term(eta, state.norm, previous_norm, largest, opt.tol)
                elif carried is not None:  # a close guess: the tolerance in one step where Newton's remainder allows
                    expected = 0.0 if remainder is None else remainder * state.norm**2
                    eta = min(largest, max(0.5 * opt.tol, expected) / state.norm)
                previous_norm = state.norm
                dx, info, rebuilt = self._linear_step(state, eta, last, fast)
                last = info
                failures = 0 if info.reason == "converged" else failures + 1
                if info.reason == "nan" or not info.relres < 1.0 or failures >= LINEAR_FAILURES:
                    steps.append(
                        Step(
                            k,
                            state.kind,
                            state.norm,
                            info.iterations,
                            info.reason,
                            info.relres,
                            0.0,
                            time.perf_counter() - t0,
                            eta,
                            rebuilt,
                            chord,
                        )
                    )
                    log(steps[-1].line(self.linear.name, stopped=True))
                    reason = "nan" if info.reason == "nan" else "linear_solver"
                    break
                next_kind = "newton" if newton or state.norm < opt.newton else "picard"
                if state.kind == "newton":
                    expected = math.inf if bound is None else info.relres * state.norm + bound * state.norm**2
                    lazy = next_kind == "newton" and (  # converged, or a fast step a chord step follows
                        expected <= opt.tol
                        or (
                            opt.keep_factor * expected <= state.norm
                            and self._chord_suffices(bound, state.norm, expected)
                        )
                    )
                    x_new, new_state, length = self._line_search(x, dx, state, next_kind, not lazy)
                else:
                    x_new = mixer.step(x, x + dx)
                    system.impose_boundary_values(x_new)
                    system.normalise_pressure(x_new)
                    new_state, length = system.assemble(x_new, next_kind), 1.0
                step = Step(
                    k,
                    state.kind,
                    state.norm,
                    info.iterations,
                    info.reason,
                    info.relres,
                    length,
                    time.perf_counter() - t0,
                    eta,
                    rebuilt,
                    chord,
                )
                steps.append(step)
                log(step.line(self.linear.name))
                if state.kind == "newton" and length == 1.0 and not chord:
                    # |F_new| <= relres |F| + C |F|^2: C at least
                    observed = max(new_state.norm - info.relres * state.norm, 0.0) / state.norm**2
                    measured = observed if measured is None else max(measured, observed)
                damped = damped + 1 if state.kind == "newton" and length <= DAMPED else 0
                if next_kind == "newton" and not newton:
                    newton, mixer = True, Anderson(0)
                x, state = x_new, new_state
                del x_new, new_state, dx  # not held while the next step makes its own
                if state.norm < 0.9 * best:
                    best, since_best = state.norm, 0
                else:
                    since_best += 1
            else:
                reason = self._stop_reason(state.norm, first, since_best, damped) or "max_steps"
        except Interrupted as exc:
            reason = f"interrupted ({exc.signal_name})"
        return NonlinearResult(
            system.backend.to_numpy(x), reason == "converged", reason, state.norm, steps, last, measured
        )

    def _linear_step(self, state, eta: float, last, fast: bool):
        """Solve J dx = -F to the relative tolerance ``eta``; returns (dx, SolveInfo, rebuilt).
        A linear solver that can keep its preconditioner (``rebuild_after`` not None) keeps
        that of an earlier linearisation after a ``fast`` Newton step (one that cut the
        residual by keep_factor or more), or while the ``last`` solve took at most its
        ``rebuild_after`` iterations (0: no such rule), unless that solve found it aged
        (:meth:`_aged`); a solve with a kept preconditioner is given at most
        :func:`reuse_limit` iterations, and if it does not converge it goes on from where it
        stopped (from zero after NaN) with a new preconditioner."""
        system, linear = self.system, self.linear
        lag = linear.rebuild_after
        keep = (
            lag is not None
            and last is not None
            and (fast or 0 < lag and last.iterations <= lag)
            and not self._aged(last)
        )
        dx = system.xp.zeros(system.n, dtype=np.float64)
        with system.timer("linear_setup"):
            linear.setup(system, state, rebuild=not keep)
        with system.timer("solve"):
            info = linear.solve(-state.residual, dx, eta, reuse_limit(last, eta, lag) if keep else None)
        self._rate(info, new=not keep)
        if not keep or info.reason == "converged":
            return dx, info, not keep
        with system.timer("linear_setup"):
            linear.setup(system, state, rebuild=True)
        if info.reason == "nan":
            dx.fill(0.0)
        with system.timer("solve"):
            retry = linear.solve(-state.residual, dx, eta)
        self._rate(retry, new=True)
        return (
            dx,
            SolveInfo(info.iterations + retry.iterations, retry.reason, retry.relres, info.history + retry.history),
            True,
        )

    def _rate(self, info: SolveInfo, new: bool) -> None:
        """Keep the most digits per iteration that solves with the present preconditioner
        reached (``new``: ``info`` is the first with a new one); a solve of one iteration (a
        loose tolerance met at once) says little and is not counted."""
        rate = digits_per_iteration(info) if info.iterations >= 2 else None
        if new or self.best is None:
            self.best = rate
        elif rate is not None:
            self.best = max(self.best, rate)

    def _aged(self, last: SolveInfo) -> bool:
        """Whether the ``last`` solve (of two iterations or more) reduced its residual by fewer
        digits per iteration than 1 / AGED of the most that a solve with the same
        preconditioner reached (self.best): the operator has drifted from the one it was built
        for (a flow in time speeding up), and the iterations a new one saves over the next
        solves cost more than building it."""
        return self.best is not None and last.iterations >= 2 and AGED * digits_per_iteration(last) < self.best

    def _stop_reason(self, norm: float, first: float, since_best: int, damped: int) -> str | None:
        opt = self.options
        if not math.isfinite(norm):
            return "nan"
        if norm <= opt.tol:
            return "converged"
        if norm > opt.diverge * first:
            return "diverged"
        if since_best >= opt.stagnation or 0 < opt.damped <= damped:
            return "stagnated"
        return None

    def _chord_suffices(self, bound: float | None, previous: float, norm: float) -> bool:
        """Whether a chord step (the last Jacobian and its preconditioner kept, a Newton step's
        cost less its assembly) from a residual ``norm`` that a Newton step from ``previous``
        reached is expected to reach half the tolerance: its remainder, about C |F_prev| |F|
        (the Jacobian changed by about C |F_prev|, Newton's remainder bound ``bound`` C), at
        most 0.5 tol. Only a linear solver that can keep its preconditioner keeps a Jacobian."""
        return (
            self.linear.rebuild_after is not None
            and bound is not None
            and bound * previous * norm <= 0.5 * self.options.tol
        )

    def _line_search(self, x, dx, state, next_kind, linearise: bool = True):
        """x + t dx for the first t in 1, 1/2, ... that reduces the residual norm by the
        Armijo factor, or the smallest, MIN_STEP (then the stagnation and divergence tests
        judge the progress). Returns (x, state, t); the full step's state without its
        linearisation unless ``linearise`` (a shorter step's always with it)."""
        system, t = self.system, 1.0
        while True:
            trial = x + t * dx
            system.impose_boundary_values(trial)
            system.normalise_pressure(trial)
            trial_state = system.assemble(trial, next_kind, linearise or t < 1.0)
            if trial_state.norm <= (1.0 - ARMIJO * t) * state.norm or t / 2 < MIN_STEP:
                return trial, trial_state, t
            t /= 2


def continuation_steps(spec: str, re: float) -> list[float]:
    """Reynolds numbers solved before ``re`` (finite and > 0, checked by the caller with the
    problem's limits): "none", "auto" (when Re > 400: 400 and geometric steps of at most
    2.5x up to Re) or a comma-separated list below ``re``; InputError for plans longer than
    MAX_STAGES."""
    if spec == "none":
        return []
    if spec == "auto":
        k = (
            math.ceil(math.log(re / CONTINUATION_START) / math.log(CONTINUATION_FACTOR) - 1e-12)
            if re > CONTINUATION_START
            else 0
        )
        return [float(f"{CONTINUATION_START * (re / CONTINUATION_START) ** (i / k):.3g}") for i in range(k)]
    try:
        steps = sorted(float(v) for v in spec.split(","))
    except ValueError:
        raise InputError(
            f"--continuation must be auto, none or a comma-separated list of Reynolds numbers (got {spec!r})"
        ) from None
    if len(steps) > MAX_STAGES:
        raise InputError(f"--continuation lists {len(steps)} Reynolds numbers; at most {MAX_STAGES}")
    for s in steps:
        check_range("--continuation", s, low=0, high=re, low_open=True)
    return [s for s in steps if s < re]


@dataclass
class Stage:
    """The solve at one Reynolds number of a continuation."""

    re: float
    result: NonlinearResult

    def as_dict(self) -> dict:
        r = self.result
        return {
            "re": self.re,
            "converged": r.converged,
            "reason": r.reason,
            "residual": r.residual,
            "steps": [vars(s) for s in r.steps],
        }


def solve_continuation(
    solver: NonlinearSolver, stages: list[float], re: float, x0=None, log=None, on_stage=None
) -> list:
    """Solve at each Reynolds number of ``stages`` (to CONTINUATION_TOL, or the final
    tolerance if tighter), then at ``re``, each from the last converged iterate (``x0``:
    this rank's initial guess or None). ``on_stage(stage)`` is called after each converged
    stage (a restartable checkpoint). A stage that stops out of reach (OUT_OF_REACH) after
    a converged one is split: the geometric mean of the two Reynolds numbers is solved
    first, from the converged stage's iterate, at most BACKOFFS times in a run; such a
    stage stagnates after SPLIT_STAGNATION steps (or the options' fewer) or SPLIT_DAMPED
    damped Newton steps in a row (a split costs less than Newton's way from outside its
    basin). Otherwise the first stage that does not converge ends the run. Returns the list
    of Stage, the stages that did not converge included."""
    log = log or (lambda line: None)
    options, out, x = solver.options, [], x0
    plan, reached, backoffs = stages + [re], None, 0
    try:
        while plan:
            stage_re = plan[0]
            solver.system.re = stage_re
            stage_options = options if stage_re == re else replace(options, tol=max(options.tol, CONTINUATION_TOL))
            if reached is not None and backoffs < BACKOFFS:  # a split can follow: give up on this stage sooner
                stage_options = replace(
                    stage_options,
                    stagnation=min(options.stagnation, SPLIT_STAGNATION),
                    damped=min(options.damped or SPLIT_DAMPED, SPLIT_DAMPED),
                )
            solver.options = stage_options
            if len(plan) > 1 or out:  # a header per stage where there are several
                log(f"Re {stage_re:g}" + (" (continuation)" if stage_re != re else ""))
            result = solver.solve(x0=x, log=lambda line: log("  " + line))
            out.append(Stage(stage_re, result))
            if result.converged:
                if on_stage is not None:
                    on_stage(out[-1])
                x, reached = result.x, stage_re
                plan.pop(0)
            elif reached is not None and result.reason in OUT_OF_REACH and backoffs < BACKOFFS:
                backoffs += 1
                plan.insert(0, float(f"{math.sqrt(reached * stage_re):.3g}"))
                log(f"Re {stage_re:g} {result.reason} from Re {reached:g}: Re {plan[0]:g} first")
            else:
                break
    finally:
        solver.options = options
    return out
