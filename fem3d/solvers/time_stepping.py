"""Implicit time stepping of the incompressible Navier-Stokes equations: each step one
nonlinear solve (fem3d.solvers.nonlinear: Newton with FGMRES and multigrid) of the steady
equations with the time derivative approximated as sigma u - h, where sigma (1/s) multiplies
the new velocity and h holds the earlier steps (the mass term on every multigrid level comes
with the element matrices, fem3d.discretisation.assembly).

Schemes, from the state u^n at t_n to u^(n+1) at t_(n+1) = t_n + dt:

``bdf2``      variable-step BDF2 (BDF1 on the first step), with w = dt / dt_prev:
              du/dt = [(1 + 2w)/(1 + w) u^(n+1) - (1 + w) u^n + w^2/(1 + w) u^(n-1)] / dt,
              boundary data and force at t_(n+1); A-stable and L-stable.
``midpoint``  the implicit midpoint rule (the one-stage Gauss method, one step, A-stable,
              second order) after a first BDF1 step, which damps what of the initial state
              the discrete equations do not admit (a start from rest with moving walls; the
              rule itself damps nothing: Rannacher's start); the stage U solves
              (U - u^n) / (dt/2) + N(U) + grad P = f(t_n + dt/2)
              with the mean of the boundary data at t_n and t_(n+1), then u^(n+1) = 2 U - u^n,
              which meets the boundary data at t_(n+1). On linear problems it is Crank-Nicolson;
              unlike Crank-Nicolson it never evaluates the operator at the old state, so the
              streamline-upwind test functions and the multigrid levels are those of one
              backward-Euler half step. Its quantities (forces, point values) are the stage's, at
              t_n + dt/2; the pressure at t_(n+1) is extrapolated from the last two stages.

Steps are fixed (``dt``; the last one shorter where dt does not divide t_end) or, with a
``tolerance``, adaptive (bdf2): a step's local error is estimated by Milne's device from
the difference of its velocity u and the quadratic extrapolation u_p of the last three
states, whose leading errors are multiples of the same third derivative (variable-step
BDF2's K_c = h^3 (1 + w)^2 / (6 w (1 + 2 w)), the extrapolation's K_p = h (h + h1)
(h + h1 + h2) / 6, with h1, h2 the steps before):
error = K_c / (K_c + K_p) ||u - u_p|| / ||u|| (l2 norms over the velocity unknowns that are
not prescribed: the boundary data are imposed, not stepped). A step
whose error exceeds the tolerance, or whose nonlinear solve fails, is made again shorter;
the next step is h (SAFETY tolerance / error)^(1/3), lengthened only by GROWTH_MIN or more
(small changes would cost the kept preconditioner for little) and at most GROWTH_MAX
(variable-step BDF2 is zero-stable for ratios below 1 + sqrt 2), within [dt_min, dt_max].
The first two steps take ``dt``: the estimate needs three states.

The stabilisation's tau is limited at the time scale of a step of ``dt`` (its sigma: 1.5 / dt
for bdf2, 2 / dt for midpoint) in every step, whatever the step's length: the discrete
equations in space stay the same as steps change (the first BDF1 step, a shorter last step,
adaptive steps), which the error estimate would otherwise take for error in time.

The guess of each step extrapolates the last states (quadratically once there are three).
Pressure is not a state (an index-2 constraint): only the velocity enters h. A step's first
Newton step keeps the preconditioner of the step before (the operator changes little from
step to step; a solve that then needs many more iterations rebuilds it:
fem3d.solvers.nonlinear), except after a checkpoint's step, so that a run continued from a
checkpoint makes the same steps bit for bit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import InputError
from gpucfd.options import setting, spelt, validate
from ..discretisation.fields import nodal_velocity

SCHEMES = ("bdf2", "midpoint")
STARTS = ("rest", "steady")
STEPS_MAX = 10_000_000  # time steps of one run
SHORT_LAST = 1e-9  # a remainder of t_end / dt below this fraction of a step is rounding: no step of its own
DIGITS = 12  # significant digits of the step times k dt (3 x 0.1 is 0.3, not 0.30000000000000004)
SAFETY = 0.9  # adaptive steps: the next step aims at this fraction of the tolerance
GROWTH_MIN = 1.2  # ... grows only by this factor or more
GROWTH_MAX = 2.0  # ... and by at most this factor
SHRINK_MAX = 0.2  # a rejected step is made again at least this fraction as long
RETRY = 0.25  # a step whose nonlinear solve failed is made again this fraction as long (adaptive)
DT_MIN_FRACTION = 1e-3  # the default smallest adaptive step, as a fraction of dt
STRETCH = 0.1  # an adaptive step reaches t_end where it would leave less than this fraction of itself
TINY = 1e-300  # an error estimate of zero (a velocity exactly extrapolated) counts as this


@dataclass
class TimeOptions:
    """t_end: the end time (the flow starts at t = 0); dt: the time step (the first ones with
    ``tolerance``; the last one may be shorter, to end at t_end); scheme: one of SCHEMES;
    tolerance: adaptive steps of this local error (module docstring), within [dt_min, dt_max];
    start: the state at t = 0 where none is given; checkpoint_every, snapshot_every: the
    steps between checkpoints and between VTU snapshots (start and these: the pipeline's and
    the front ends', not the stepping's)."""

    t_end: float | None = setting(
        None, "end time of an unsteady run (it starts at t = 0), > 0", low=0, low_open=True, optional=True
    )
    dt: float | None = setting(
        None, "time step (with tolerance: the first steps), in (0, t_end]", low=0, low_open=True, optional=True
    )
    scheme: str = setting(
        "bdf2", "time scheme: bdf2 (variable-step BDF2), midpoint (implicit midpoint rule)", choices=SCHEMES
    )
    tolerance: float | None = setting(
        None,
        "adaptive steps (bdf2): the local error of a step's velocity relative to its size, in (0, 1); "
        "none for fixed steps",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
        optional=True,
    )
    dt_min: float | None = setting(
        None, "smallest adaptive step, in (0, dt] (default dt / 1000)", low=0, low_open=True, optional=True
    )
    dt_max: float | None = setting(
        None, "largest adaptive step, >= dt (default: no bound)", low=0, low_open=True, optional=True
    )
    start: str = setting(
        "rest",
        "the state at t = 0 (without --initial): rest (the boundary data at t = 0 imposed) or steady (the steady "
        "flow of the data at t = 0, solved first)",
        choices=STARTS,
    )
    checkpoint_every: int = setting(
        100,
        "write checkpoint.npz (the state a run continues from, --initial) every this many steps and when stopped, "
        "0 only when stopped",
        low=0,
        integer=True,
    )
    snapshot_every: int = setting(
        0, "write the flow's VTU every this many steps, with a PVD time series; 0 for none", low=0, integer=True
    )

    def __post_init__(self):
        validate(self)
        for name in ("t_end", "dt"):
            if getattr(self, name) is None:
                raise InputError(f"{spelt(name, self)} must be given for an unsteady run")
        if self.dt > self.t_end:
            raise InputError(
                f"{spelt('dt', self)} must be at most {spelt('t_end', self)} = {self.t_end:g} (got {self.dt:g})"
            )
        if self.tolerance is None:
            for name in ("dt_min", "dt_max"):
                if getattr(self, name) is not None:
                    raise InputError(f"{spelt(name, self)} bounds adaptive steps: give {spelt('tolerance', self)} too")
        elif self.scheme != "bdf2":
            raise InputError(
                f"{spelt('tolerance', self)} (adaptive steps) needs {spelt('scheme', self)} bdf2 (got {self.scheme})"
            )
        if not self.dt_smallest <= self.dt <= self.dt_largest:
            raise InputError(
                f"the steps must satisfy {spelt('dt_min', self)} <= {spelt('dt', self)} <= {spelt('dt_max', self)} "
                f"(got {self.dt_smallest:g}, {self.dt:g}, {self.dt_largest:g})"
            )
        smallest = "dt_min" if self.adaptive else "dt"
        if self.t_end / self.dt_smallest > STEPS_MAX:
            raise InputError(
                f"{spelt(smallest, self)} = {self.dt_smallest:g} makes more than {STEPS_MAX} steps to t_end = "
                f"{self.t_end:g}"
            )

    @property
    def adaptive(self) -> bool:
        return self.tolerance is not None

    @property
    def dt_smallest(self) -> float:
        """The shortest step (dt for fixed steps)."""
        if not self.adaptive:
            return self.dt
        return self.dt * DT_MIN_FRACTION if self.dt_min is None else self.dt_min

    @property
    def dt_largest(self) -> float:
        """The longest step (dt for fixed steps)."""
        if not self.adaptive:
            return self.dt
        return math.inf if self.dt_max is None else self.dt_max

    def times(self) -> np.ndarray:
        """(steps + 1,) the times t_0 = 0, ..., t_end of fixed steps of dt: multiples of dt (to
        DIGITS significant digits), the last step shorter where dt does not divide t_end."""
        n = max(1, math.ceil(self.t_end / self.dt - SHORT_LAST))
        return np.array([float(f"{k * self.dt:.{DIGITS}g}") for k in range(n)] + [self.t_end])

    def stage_times(self) -> np.ndarray:
        """The times at which fixed steps evaluate the boundary data and force (the step ends for
        bdf2; for midpoint also the midpoints, where the force is taken); adaptive steps evaluate
        them at other times too, each checked as it comes."""
        t = self.times()
        return t if self.scheme == "bdf2" else np.sort(np.concatenate([t, 0.5 * (t[1:] + t[:-1])]))


def check_alone(continuation: str, sequence: str, spell) -> None:
    """InputError for a continuation or mesh sequencing asked of a run in time (its steps
    start from the state at t = 0); ``spell(name)``: the user's spelling of each setting."""
    for name, value in (("continuation", continuation), ("sequence", sequence)):
        if value != "none":
            raise InputError(f"{spell(name)} must be none for an unsteady run (got {value!r})")


@dataclass
class TimeStep:
    """One step: its number (from 1), the time of its quantities ``t`` (the step's end, or the
    midpoint stage's time), the time it reaches ``end``, its length, the nonlinear solve (the
    Newton steps, Krylov iterations and seconds of its rejected attempts included), the
    attempts ``rejected`` before it and its estimated local error (None where not estimated)."""

    step: int
    t: float
    end: float
    dt: float
    converged: bool
    reason: str
    residual: float
    nonlinear_steps: int
    linear_iterations: int
    seconds: float
    rejected: int = 0
    error: float | None = None

    def line(self, t_end: float, eta_s: float | None) -> str:
        left = "" if eta_s is None else f"  {_duration(eta_s)} left"
        error = "" if self.error is None else f"  error {self.error:.1e}"
        again = f"  ({self.rejected} rejected)" if self.rejected else ""
        return (
            f"step {self.step}  t {self.end:.6g}/{t_end:g}  dt {self.dt:.3g}  {self.nonlinear_steps} Newton, "
            f"{self.linear_iterations} Krylov  {self.seconds:.2f} s{error}{again}{left}"
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class TimeState:
    """What the next step needs: ``step`` steps done, the time ``t`` they reached and the
    state ``x`` there; the states one and two steps before, ``previous`` and ``older`` (None
    before there are such), with those steps' lengths ``dt_previous`` and ``dt_older``; the
    last vector solved with the time of its quantities, ``sample`` (vector, t) (the midpoint
    rule extrapolates its pressure; None at the start); the next step's length ``dt_next``
    (adaptive; None: dt). Vectors are this rank's, or whole in a checkpoint
    (fem3d.problems.checkpoint)."""

    step: int
    t: float
    x: object
    previous: object = None
    dt_previous: float | None = None
    sample: tuple | None = None
    older: object = None
    dt_older: float | None = None
    dt_next: float | None = None

    def vectors(self) -> dict:
        """{name: vector or None} of the state's vectors (the sample's as "sample")."""
        return {
            "x": self.x,
            "previous": self.previous,
            "older": self.older,
            "sample": None if self.sample is None else self.sample[0],
        }

    def mapped(self, f) -> "TimeState":
        """This state with f applied to each of its vectors (None stays None)."""
        v = {k: None if a is None else f(a) for k, a in self.vectors().items()}
        sample = None if self.sample is None else (v["sample"], self.sample[1])
        return TimeState(
            self.step, self.t, v["x"], v["previous"], self.dt_previous, sample, v["older"], self.dt_older, self.dt_next
        )


def extrapolate(state: TimeState, t: float):
    """The state extrapolated to the time ``t`` through the last two or three states (linear or
    quadratic Lagrange interpolation in time); x itself at the start."""
    x, previous, older = state.x, state.previous, state.older
    if previous is None:
        return x
    t0, t1 = state.t, state.t - state.dt_previous
    if older is None:
        return x + ((t - t0) / (t0 - t1)) * (x - previous)
    t2 = t1 - state.dt_older
    w0 = (t - t1) * (t - t2) / ((t0 - t1) * (t0 - t2))
    w1 = (t - t0) * (t - t2) / ((t1 - t0) * (t1 - t2))
    w2 = (t - t0) * (t - t1) / ((t2 - t0) * (t2 - t1))
    return w0 * x + w1 * previous + w2 * older


def error_fraction(h: float, h1: float, h2: float) -> float:
    """K_c / (K_c + K_p) of a BDF2 step h after steps h1 and h2 (module docstring): the part of
    the difference from the quadratic extrapolation that is the step's local error."""
    w = h / h1
    corrector = h**3 * (1.0 + w) ** 2 / (6.0 * w * (1.0 + 2.0 * w))
    predictor = h * (h + h1) * (h + h1 + h2) / 6.0
    return corrector / (corrector + predictor)


class TimeStepper:
    """The steps of ``options`` (TimeOptions) for a NavierStokesSystem ``system`` solved by a
    fem3d.solvers.nonlinear.NonlinearSolver ``solver`` (its system)."""

    def __init__(self, system, solver, options: TimeOptions):
        self.system, self.solver, self.options = system, solver, options
        self.grid = None if options.adaptive else options.times()
        self.tau_sigma = (2.0 if options.scheme == "midpoint" else 1.5) / options.dt  # sigma of a step of dt
        self.stepped = ~system.fixed  # the unknowns of the error estimate: velocity not prescribed
        self.stepped[3 * system.mesh.n_nodes :] = False

    def end_of_step(self, k: int, t: float, dt: float) -> float:
        """The time that step number ``k`` from ``t`` reaches: the fixed grid's, or t + dt
        (adaptive), t_end where at most STRETCH of a step would remain after it (no sliver of a
        last step; only the step that reaches t_end depends on t_end, so a run continued to a
        later t_end from a checkpoint before it makes the same steps)."""
        if self.grid is not None:
            return float(self.grid[k])
        t_end = self.options.t_end
        return t_end if t_end - t <= (1.0 + STRETCH) * dt else t + dt

    def run(self, start: TimeState, log=None, on_step=None, status=None):
        """Step from ``start`` (its vectors this rank's, device or host; TimeState(0, 0.0, x0)
        starts at t = 0) to t_end. ``on_step(step, x, state)`` is called after each converged
        step with its TimeStep, the state (this rank's vector, on the host as NonlinearResult.x)
        whose quantities it reports (the system's equations still those of the step: forces by
        the residual include the time derivative) and the TimeState after it; ``status(step,
        fraction, eta_s)`` then gets the step, the fraction of the run's time done and the
        estimated seconds left (default: a line to ``log``); ``log(line)`` gets the Newton steps
        of a step whose solve fails and each rejected attempt. Returns (the TimeState of the
        last converged step, [TimeStep], reason): reason "converged" when t_end was reached,
        else the reason the step's solve stopped."""
        opts, xp = self.options, self.system.xp
        log = log or (lambda line: None)
        status = status or (lambda step, fraction, eta: log(step.line(opts.t_end, eta)))
        state = start.mapped(lambda v: xp.asarray(v, dtype=np.float64).copy())
        if start.step == 0:
            self.system.impose_boundary_values(state.x)
        records, started, carried = [], time.perf_counter(), (None, None)
        while state.t < opts.t_end:
            k = state.step + 1
            step, host, solved, carried = self._step(state, k, carried, log)
            records.append(step)
            if not step.converged:
                return state, records, step.reason
            state = self._advance(state, step, solved)
            if on_step is not None:
                on_step(step, host, state)
            rate = (time.perf_counter() - started) / (state.t - start.t)  # seconds per unit of time
            status(step, state.t / opts.t_end, rate * (opts.t_end - state.t) if state.t < opts.t_end else None)
        return state, records, "converged"

    def _step(self, state: TimeState, k: int, carried, log):
        """Step number ``k`` from ``state``: (its TimeStep, the vector solved on the host and on
        the device (None where the solve failed), what the next step keeps: (the last linear solve,
        its Newton remainder)); adaptive steps are made again shorter while their error exceeds
        the tolerance or their solve fails."""
        opts, xp = self.options, self.system.xp
        dt = opts.dt if state.dt_next is None else state.dt_next
        rejected, newton, linear, clock = 0, 0, 0, time.perf_counter()
        while True:
            t1 = self.end_of_step(k, state.t, dt)
            kind = "bdf1" if state.previous is None else opts.scheme
            h = t1 - state.t
            t_report = self._set_step(kind, state, t1)
            newton_lines = []  # shown where the step fails
            guess = extrapolate(state, t_report)
            result = self.solver.solve(x0=guess, log=newton_lines.append, carried=carried[0], remainder=carried[1])
            newton, linear = newton + len(result.steps), linear + result.linear_iterations
            solved = xp.asarray(result.x) if result.converged else None
            shorter = max(h * RETRY, opts.dt_smallest)
            error = None
            if solved is not None and opts.adaptive and state.older is not None:
                error = self._error(state, solved, t1)
                shorter = max(h * max(SHRINK_MAX, self._factor(error)), opts.dt_smallest)
            retry = opts.adaptive and h > opts.dt_smallest and shorter < h
            if retry and not result.converged:
                log(f"step {k} (t {t1:.6g}, dt {h:.3g}): the nonlinear solve stopped ({result.reason}): made again")
            elif retry and error is not None and error > opts.tolerance:
                log(f"step {k} (t {t1:.6g}, dt {h:.3g}): error {error:.1e} over the tolerance: made again")
                carried = (result.last_solve, result.remainder)
            else:
                if error is not None and error > opts.tolerance:
                    log(f"step {k} (t {t1:.6g}): error {error:.1e} over the tolerance at the smallest step {h:.3g}")
                break
            rejected, dt = rejected + 1, shorter
            carried = carried if result.converged else (None, None)
        if not result.converged:
            for line in newton_lines:
                log("    " + line)
            log(f"step {k} (t {t1:.6g}): the nonlinear solve stopped: {result.reason}")
        every = opts.checkpoint_every
        step = TimeStep(
            k,
            t_report,
            t1,
            h,
            result.converged,
            result.reason,
            result.residual,
            newton,
            linear,
            time.perf_counter() - clock,
            rejected,
            error,
        )
        # a checkpoint's next step rebuilds and starts afresh
        kept = (None, None) if every and k % every == 0 else (result.last_solve, result.remainder)
        return step, result.x, solved, kept

    def _advance(self, state: TimeState, step: TimeStep, solved) -> TimeState:
        """The state after the converged ``step`` from ``state`` (``solved`` its vector on the device)."""
        opts = self.options
        end = (
            self._midpoint_end(state.x, solved, step.t, step.end, state.sample)
            if opts.scheme == "midpoint" and (state.previous is not None)
            else solved
        )
        dt_next = None
        if opts.adaptive:
            dt_next = step.dt
            if step.error is not None:
                factor = self._factor(step.error)
                if factor < 1.0 or factor >= GROWTH_MIN:
                    dt_next = step.dt * min(factor, GROWTH_MAX)
            dt_next = min(max(dt_next, opts.dt_smallest), opts.dt_largest)
        return TimeState(
            step.step,
            step.end,
            end,
            state.x,
            step.dt,
            (solved, step.t),
            state.previous,
            state.dt_previous,
            dt_next,
        )

    def _factor(self, error: float) -> float:
        """The step that the estimated local ``error`` of a step asks for, as a multiple of it."""
        return SAFETY * (self.options.tolerance / max(error, TINY)) ** (1 / 3)

    def _error(self, state: TimeState, solved, t1: float) -> float:
        """The estimated local error of the BDF2 step from ``state`` to ``solved`` at t1,
        relative to the velocity's size, both over the velocity unknowns the equations
        determine (prescribed ones are imposed, not stepped; module docstring); collective."""
        xp, dot = self.system.xp, self.system.dist.dot
        u = xp.where(self.stepped, solved, 0.0)
        difference = xp.where(self.stepped, solved - extrapolate(state, t1), 0.0)
        size = math.sqrt(dot(u, u))
        fraction = error_fraction(t1 - state.t, state.dt_previous, state.dt_older)
        return fraction * math.sqrt(dot(difference, difference)) / size if size > 0 else 0.0

    def _set_step(self, kind: str, state: TimeState, t1: float) -> float:
        """Give the system the equations of a step of ``kind`` (bdf1, bdf2, midpoint) from
        ``state`` to t1; returns the time of the step's quantities."""
        system, problem = self.system, self.system.problem
        n = system.mesh.n_nodes
        u = nodal_velocity(system.xp, state.x, n)
        t0 = state.t
        dt = t1 - t0
        timed = problem.prescribed_at is not None  # else the prescribed values stay those on the device
        if kind == "midpoint":
            prescribed = 0.5 * (problem.values_at(t0) + problem.values_at(t1)) if timed else None
            system.set_time(2.0 / dt, (2.0 / dt) * u, t0 + 0.5 * dt, prescribed, self.tau_sigma)
            return t0 + 0.5 * dt
        prescribed = problem.values_at(t1) if timed else None
        if kind == "bdf1":
            system.set_time(1.0 / dt, u / dt, t1, prescribed, self.tau_sigma)
        else:
            omega = dt / state.dt_previous
            u_old = nodal_velocity(system.xp, state.previous, n)
            history = ((1.0 + omega) * u - (omega * omega / (1.0 + omega)) * u_old) / dt
            system.set_time((1.0 + 2.0 * omega) / ((1.0 + omega) * dt), history, t1, prescribed, self.tau_sigma)
        return t1

    def _midpoint_end(self, x, stage, t_stage: float, t1: float, sample):
        """The state at t1 from the midpoint stage ``stage`` at t_stage (x the state at the
        step's start): velocity 2 U - u^n; pressure extrapolated linearly from the last pressure
        solved, ``sample`` (vector, time), and the stage's."""
        n3 = 3 * self.system.mesh.n_nodes
        end = stage.copy()
        end[:n3] = 2.0 * stage[:n3] - x[:n3]
        before, t_before = sample
        end[n3:] += (stage[n3:] - before[n3:]) * ((t1 - t_stage) / (t_stage - t_before))
        return end
