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

The guess of each step extrapolates the last two states linearly. Pressure is not a state
(an index-2 constraint): only the velocity enters h. A step's first Newton step keeps the
preconditioner of the step before (the operator changes little from step to step; a solve
that then needs many more iterations rebuilds it: fem3d.solvers.nonlinear), except after a
checkpoint's step, so that a run continued from a checkpoint makes the same steps bit for bit.
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
STEPS_MAX = 10_000_000  # time steps of one run
SHORT_LAST = 1e-9  # a remainder of t_end / dt below this fraction of a step is rounding: no step of its own
DIGITS = 12  # significant digits of the step times k dt (3 x 0.1 is 0.3, not 0.30000000000000004)


@dataclass
class TimeOptions:
    """t_end: the end time (the flow starts at t = 0); dt: the time step (the last one may be
    shorter, to end at t_end); scheme: one of SCHEMES; checkpoint_every, snapshot_every: the
    steps between checkpoints and between VTU snapshots (the pipeline's and the front ends'
    output, not the stepping's)."""

    t_end: float | None = setting(
        None, "end time of an unsteady run (it starts at t = 0), > 0", low=0, low_open=True, optional=True
    )
    dt: float | None = setting(None, "time step, in (0, t_end]", low=0, low_open=True, optional=True)
    scheme: str = setting(
        "bdf2", "time scheme: bdf2 (variable-step BDF2), midpoint (implicit midpoint rule)", choices=SCHEMES
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
        if self.t_end / self.dt > STEPS_MAX:
            raise InputError(
                f"{spelt('dt', self)} = {self.dt:g} makes more than {STEPS_MAX} steps to t_end = {self.t_end:g}"
            )

    def times(self) -> np.ndarray:
        """(steps + 1,) the times t_0 = 0, ..., t_end of the steps: multiples of dt (to DIGITS
        significant digits), the last step shorter where dt does not divide t_end."""
        n = max(1, math.ceil(self.t_end / self.dt - SHORT_LAST))
        return np.array([float(f"{k * self.dt:.{DIGITS}g}") for k in range(n)] + [self.t_end])

    def stage_times(self) -> np.ndarray:
        """The times at which the boundary data and force are evaluated in the steps (the
        step ends for bdf2; for midpoint also the midpoints, where the force is taken)."""
        t = self.times()
        return t if self.scheme == "bdf2" else np.sort(np.concatenate([t, 0.5 * (t[1:] + t[:-1])]))


@dataclass
class TimeStep:
    """One step: its number (from 1), the time of its quantities ``t`` (the step's end, or the
    midpoint stage's time), the time it reaches ``end``, its length, the nonlinear solve."""

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

    def line(self, steps: int, eta_s: float | None) -> str:
        left = "" if eta_s is None else f"  {_duration(eta_s)} left"
        return (
            f"step {self.step:{len(str(steps))}d}/{steps}  t {self.end:.6g}  dt {self.dt:.3g}  "
            f"{self.nonlinear_steps} Newton, {self.linear_iterations} Krylov  {self.seconds:.2f} s{left}"
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class TimeState:
    """What the next step needs: ``step`` steps done, the state ``x`` at TimeOptions.times()[step],
    the state a step before, ``previous`` (None before the second step), that step's length
    ``dt_previous``, and the last vector solved with the time of its quantities, ``sample``
    (vector, t) (the midpoint rule extrapolates its pressure; None at the start). Vectors are
    this rank's, or whole in a checkpoint (fem3d.problems.checkpoint)."""

    step: int
    x: object
    previous: object = None
    dt_previous: float | None = None
    sample: tuple | None = None


class TimeStepper:
    """The steps of ``options`` (TimeOptions) for a NavierStokesSystem ``system`` solved by a
    fem3d.solvers.nonlinear.NonlinearSolver ``solver`` (its system)."""

    def __init__(self, system, solver, options: TimeOptions):
        self.system, self.solver, self.options = system, solver, options

    def run(self, start: TimeState, log=None, on_step=None):
        """Step from ``start`` (its vectors this rank's, device or host; TimeState(0, x0) starts
        at t = 0) to t_end. ``on_step(step, x, state)`` is called after each converged step
        with its TimeStep, the state (this rank's vector, on the host as NonlinearResult.x)
        whose quantities it reports (the system's equations still those of the step: forces by
        the residual include the time derivative) and the TimeState after it; ``log(line)``
        gets a line per step, and the Newton steps of a step whose solve fails. Returns (the
        TimeState of the last converged step, [TimeStep], reason): reason "converged" when
        t_end was reached, else the reason the step's solve stopped."""
        system, xp = self.system, self.system.xp
        log = log or (lambda line: None)
        times = self.options.times()
        steps = len(times) - 1

        def device(v):
            return None if v is None else xp.asarray(v, dtype=np.float64).copy()

        x, previous, dt_previous = device(start.x), device(start.previous), start.dt_previous
        sample = None if start.sample is None else (device(start.sample[0]), start.sample[1])
        if start.step == 0:
            system.impose_boundary_values(x)
        state = TimeState(start.step, x, previous, dt_previous, sample)
        records, started, carried = [], time.perf_counter(), None
        for k in range(start.step + 1, steps + 1):
            t0, t1 = float(times[k - 1]), float(times[k])
            dt = t1 - t0
            kind = "bdf1" if previous is None else self.options.scheme
            omega = 0.0 if previous is None else dt / dt_previous
            guess = x if previous is None else x + (0.5 * omega if kind == "midpoint" else omega) * (x - previous)
            t_report = self._set_step(kind, x, previous, t0, t1, omega)
            clock = time.perf_counter()
            newton_lines = []  # shown where the step fails
            result = self.solver.solve(x0=guess, log=newton_lines.append, carried=carried)
            every = self.options.checkpoint_every
            carried = None if every and k % every == 0 else result.last_solve  # a checkpoint's next step rebuilds
            record = TimeStep(
                k,
                t_report,
                t1,
                dt,
                result.converged,
                result.reason,
                result.residual,
                len(result.steps),
                result.linear_iterations,
                time.perf_counter() - clock,
            )
            records.append(record)
            if not result.converged:
                for line in newton_lines:
                    log("    " + line)
                log(f"step {k} (t {t1:.6g}): the nonlinear solve stopped: {result.reason}")
                return state, records, result.reason
            solved = xp.asarray(result.x)
            end = self._midpoint_end(x, solved, t_report, t1, sample) if kind == "midpoint" else solved
            previous, x, dt_previous, sample = x, end, dt, (solved, t_report)
            state = TimeState(k, x, previous, dt_previous, sample)
            if on_step is not None:
                on_step(record, result.x, state)
            done = k - start.step
            elapsed = time.perf_counter() - started
            log(record.line(steps, elapsed / done * (steps - k) if k < steps else None))
        return state, records, "converged"

    def _set_step(self, kind: str, x, previous, t0: float, t1: float, omega: float) -> float:
        """Give the system the equations of a step of ``kind`` (bdf1, bdf2, midpoint) from t0
        to t1 (x the state at t0, ``previous`` the one before, omega the ratio of this step to
        the last); returns the time of the step's quantities."""
        system, problem = self.system, self.system.problem
        n = system.mesh.n_nodes
        u = nodal_velocity(system.xp, x, n)
        dt = t1 - t0
        timed = problem.prescribed_at is not None  # else the prescribed values stay those on the device
        if kind == "midpoint":
            prescribed = 0.5 * (problem.values_at(t0) + problem.values_at(t1)) if timed else None
            system.set_time(2.0 / dt, (2.0 / dt) * u, t0 + 0.5 * dt, prescribed)
            return t0 + 0.5 * dt
        prescribed = problem.values_at(t1) if timed else None
        if kind == "bdf1":
            system.set_time(1.0 / dt, u / dt, t1, prescribed)
        else:
            u_old = nodal_velocity(system.xp, previous, n)
            history = ((1.0 + omega) * u - (omega * omega / (1.0 + omega)) * u_old) / dt
            system.set_time((1.0 + 2.0 * omega) / ((1.0 + omega) * dt), history, t1, prescribed)
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
