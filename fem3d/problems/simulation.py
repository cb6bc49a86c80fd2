"""One run of a flow, steady or in time, whatever the front door: ``python -m fem3d.cavity``, ``fem3d.run``,
``fem3d.verify`` and ``fem3d.Flow.solve`` all build a :class:`Simulation` and run it.

Making one checks, collectively (inside fem3d.parallel.comm.agreed_errors), what can be
checked before any work: the continuation's plan, the linear solver for the mesh and the
assembly that fits the device (fem3d.problems.memory), the partition of the mesh among the
ranks, and the coarser meshes of mesh sequencing (fem3d.solvers.sequencing), the flow solved
first on coarser meshes of its hierarchy, each solution the next mesh's initial guess.
:meth:`Simulation.run` then builds the system and the solvers, solves the continuation's
Reynolds numbers (or, with ``time``, steps in time: fem3d.solvers.time_stepping) and returns
the one record of a run, fem3d.problems.result.FlowResult. Nothing here writes into the flow:
a continuation's stage Reynolds number is the system's.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from gpucfd.backend import PhaseTimer

from ..parallel.comm import SerialComm
from ..parallel.interrupt import InterruptCheck
from ..parallel.partition import distribute, partition_elements
from ..solvers.linear import LinearOptions, make_linear_solver
from ..solvers.multigrid import coarse_elements
from ..solvers.nonlinear import NonlinearOptions, NonlinearSolver, Stage, continuation_steps, solve_continuation
from ..solvers.sequencing import interpolate, redundant
from ..solvers.sequencing import limits as sequence_limits
from ..solvers.sequencing import plan as sequence_plan
from ..solvers.time_stepping import TimeOptions, TimeState, TimeStepper, check_alone
from ..discretisation.mesh import HexMesh
from gpucfd.errors import InputError
from gpucfd.options import spelt
from .distributed import partitioned_system, rank_report
from .memory import BOX_COARSE, fitting_assembly, host_share
from .result import FlowResult


def default_nonlinear() -> NonlinearOptions:
    """The nonlinear options of a run that gives none: to 1e-8, Newton once the residual is below 1."""
    return NonlinearOptions(tol=1e-8, max_steps=200, newton=1.0)


@dataclass
class Simulation:
    """A steady flow's run. ``flow``: fem3d.problems.flow.Flow (its mesh, Reynolds number and
    ``problem_on(mesh)``, its equations on any mesh of the hierarchy); ``backend`` and
    ``comm`` from fem3d.parallel.comm.setup; ``continuation``: the Reynolds numbers solved
    first (fem3d.solvers.nonlinear.continuation_steps); ``sequence``: the coarser meshes
    solved first (fem3d.solvers.sequencing.plan: none, auto or a count; only without
    ``initial`` and, for auto, with the mg solver); ``initial``: the whole solution
    (n_dofs,) to start from; ``started``: time.perf_counter() where the preparation of the
    run began (default: now), so that reading or building the mesh counts in its data
    preparation; ``time``: fem3d.solvers.time_stepping.TimeOptions of an unsteady run (None:
    steady), which starts from ``initial`` or from rest with the boundary data at t = 0 (no
    continuation nor sequencing), or continues from ``resume``, a checkpoint's TimeState of
    whole vectors (fem3d.problems.checkpoint). After construction, ``linear`` is resolved for the mesh,
    ``notes`` holds warnings for the user (a partial assembly chosen for memory) and ``part``
    this rank's part of the mesh."""

    flow: object
    backend: object
    comm: object
    nonlinear: NonlinearOptions = field(default_factory=default_nonlinear)
    linear: LinearOptions = field(default_factory=LinearOptions)
    continuation: str = "none"
    sequence: str = "none"
    initial: np.ndarray | None = None
    started: float | None = None
    time: TimeOptions | None = None
    resume: TimeState | None = None
    notes: list = field(default_factory=list)

    def __post_init__(self):
        self.started = time.perf_counter() if self.started is None else self.started
        mesh, comm, backend = self.flow.mesh, self.comm, self.backend
        self._check_time()
        self.stages = continuation_steps(self.continuation, self.flow.re)
        sequence_limits(self.sequence, backend.kind)  # checked also where an initial guess leaves it unused
        self.linear = self.linear.for_mesh(mesh, comm.size)
        coarse = coarse_elements(mesh, comm.size) / mesh.n_elements if self.linear.solver == "mg" else BOX_COARSE
        self.linear, note = fitting_assembly(
            backend,
            self.linear,
            mesh,
            comm.size,
            coarse,
            self.time is not None,
            host_share(mesh, comm.size),
        )
        self.notes += [note] if note else []
        if self.initial is not None:
            self.initial = _solution("initial=", self.initial, mesh.n_dofs)
        self.part = distribute(mesh, comm, backend, self.linear.alignment(mesh, comm.size))
        auto_off = self.sequence == "auto" and self.linear.solver != "mg"
        self.coarser = (
            []
            if self.initial is not None or auto_off
            else sequence_plan(self.sequence, mesh, backend.kind, self._solvable)
        )

    def _check_time(self) -> None:
        """InputError for a flow whose data change in time without time stepping, for time
        stepping with a continuation or mesh sequencing, and for boundary data that are not
        finite at some time the steps evaluate them."""
        problem = self.flow.problem
        if self.resume is not None and self.time is None:
            raise InputError("a checkpoint (resume=) continues a run in time: give time=")
        if self.time is None:
            if problem.in_time:
                raise InputError(
                    "the boundary velocity or the force depends on the time t: give the time stepping (a [time] "
                    "table in a case file, time= in Python)"
                )
            return
        if not isinstance(self.time, TimeOptions):
            raise InputError(f"time= must be a TimeOptions or None (got {type(self.time).__name__})")
        check_alone(self.continuation, self.sequence, lambda name: f"{name}=")
        if problem.prescribed_at is not None:
            for t in self.time.stage_times():
                problem.values_at(float(t))
        if self.time.start == "steady" and self.initial is not None:
            raise InputError(
                f"{spelt('start', self.time)} = steady solves the state at t = 0: give no initial state with it"
            )

    def _solvable(self, mesh: HexMesh) -> bool:
        """A coarser mesh of sequencing can be solved by this run's linear solver on its ranks."""
        ranks = 1 if redundant(mesh) else self.comm.size
        try:
            resolved = self.linear.for_mesh(mesh, ranks)
            partition_elements(mesh, ranks, resolved.alignment(mesh, ranks))
        except InputError:
            return False
        return resolved.solver == self.linear.solver

    def run(self, log=None, progress=None, on_stage=None, on_step=None, on_checkpoint=None, status=None) -> FlowResult:
        """Solve (collective): the coarser meshes first, then the continuation on the mesh; or
        the steps in time. ``log(line)`` receives progress lines, ``progress(iteration, relres)``
        the Krylov checks (a stop signal is honoured at each, fem3d.parallel.interrupt),
        ``on_stage(stage, whole)`` each converged Reynolds number of the mesh's continuation
        (``whole``: its solution gathered, rank 0's; a checkpoint), ``on_step(step, state)``
        each time step (fem3d.solvers.time_stepping.TimeStep, and a FlowResult of the step's
        state for its quantities: forces, point values; collective), ``on_checkpoint(state)``
        every ``time.checkpoint_every`` steps and where the steps stop short of t_end (the
        TimeState with whole vectors, rank 0's; None elsewhere), ``status(step, fraction,
        eta_s)`` after each time step (fem3d.solvers.time_stepping.TimeStepper.run; default: a
        line to ``log``)."""
        log = log or (lambda line: None)
        backend, comm, part = self.backend, self.comm, self.part
        check = InterruptCheck(comm)
        watch = check if progress is None else (lambda it, relres: (progress(it, relres), check(it, relres)))
        if self.time is not None:
            return self._run_in_time(log, watch, on_step, on_checkpoint, status)
        timer, since, sequence = PhaseTimer(backend), self.started, []
        stages, nonlinear = self.stages, self.nonlinear
        x0 = None if self.initial is None else self.initial[part.dist.gdofs]
        if self.coarser:
            x0, sequence, since = self._coarser_first(timer, log, watch)
            backend.release_cached()  # the coarse systems' memory, for the fine system and its cycle's graph pool
            if x0 is not None:
                stages, nonlinear = [], from_coarser(nonlinear)
        system = partitioned_system(
            self.flow.problem,
            part,
            backend,
            self.linear.matrix_dtype,
            prepared_since=since,
            assembly=self.linear.assembly,
            timer=timer,
        )
        linear_solver = make_linear_solver(self.linear, watch)
        solver = NonlinearSolver(system, linear_solver, nonlinear, InterruptCheck(comm))
        gathered = {}

        def converged_stage(stage):
            gathered["x"], gathered["whole"] = stage.result.x, part.dist.gather(stage.result.x)
            if on_stage is not None:
                on_stage(stage, gathered["whole"])

        done = solve_continuation(solver, stages, self.flow.re, x0, log, converged_stage)
        last = done[-1].result
        finished = time.perf_counter()
        x = gathered["whole"] if gathered.get("x") is last.x else part.dist.gather(last.x)
        return FlowResult(
            flow=self.flow,
            system=system,
            part=part,
            comm=comm,
            x_local=last.x,
            x=x,
            converged=last.converged and done[-1].re == self.flow.re,
            reason=last.reason,
            residual=last.residual,
            history=[s.as_dict() for s in done],
            options={"nonlinear": asdict(self.nonlinear), "linear": asdict(self.linear)},
            times_s=system.phase_seconds(),
            per_rank=rank_report(comm, system, part, backend, linear_solver),  # collective
            device=backend.describe(),
            sequence=sequence,
            finished=finished,
        )

    def _run_in_time(self, log, progress, on_step, on_checkpoint, status) -> FlowResult:
        """The steps of ``time`` from ``resume``, ``initial``, rest or the steady flow of the data
        at t = 0 (``time.start``; its solve the result's history) on the mesh (:meth:`run`)."""
        backend, comm, part = self.backend, self.comm, self.part
        system = partitioned_system(
            self.flow.problem,
            part,
            backend,
            self.linear.matrix_dtype,
            prepared_since=self.started,
            assembly=self.linear.assembly,
            timer=PhaseTimer(backend),
        )
        linear_solver = make_linear_solver(self.linear, progress)
        solver = NonlinearSolver(system, linear_solver, in_time(self.nonlinear), InterruptCheck(comm))
        mine = part.dist.gdofs
        history, reason, steps = [], "converged", []
        if self.resume is not None:
            start = self.resume.mapped(lambda v: v[mine])
        else:
            x0 = system.initial_guess() if self.initial is None else self.initial[mine]
            if self.time.start == "steady":  # the data at t = 0 as a steady flow: the system has sigma 0 until set_time
                log("the steady flow at t = 0:")
                steady = NonlinearSolver(system, linear_solver, self.nonlinear, InterruptCheck(comm)).solve(
                    x0=x0, log=lambda line: log("  " + line)
                )
                history = [Stage(self.flow.re, steady).as_dict()]
                x0 = steady.x
                reason = "converged" if steady.converged else f"steady start: {steady.reason}"
            start = TimeState(0, 0.0, x0)
        every = self.time.checkpoint_every

        def checkpoint(state):
            if on_checkpoint is not None:
                on_checkpoint(self._whole(state))

        def stepped(step, x, state):
            if on_step is not None:
                on_step(step, self._result(system, linear_solver, x, None, [], step.reason, step.residual, False))
            if every and state.step % every == 0:
                checkpoint(state)

        last = start
        if reason == "converged":
            last, steps, reason = TimeStepper(system, solver, self.time).run(start, log, stepped, status)
        if reason != "converged" and last.step > start.step and not (every and last.step % every == 0):
            checkpoint(last)
        x = backend.to_numpy(last.x)
        finished = time.perf_counter()
        residual = steps[-1].residual if steps else history[-1]["residual"] if history else 0.0
        result = self._result(system, linear_solver, x, part.dist.gather(x), history, reason, residual, True)
        result.finished, result.time_steps = finished, steps
        done = [s for s in steps if s.converged]
        newton = sum(s.nonlinear_steps for s in steps)
        result.time = {
            **asdict(self.time),
            "t": last.t,
            "steps": last.step,
            "started_at_step": start.step,
            "newton_steps": newton,
            "linear_iterations": sum(s.linear_iterations for s in steps),
            "linear_iterations_per_newton_step": sum(s.linear_iterations for s in steps) / max(newton, 1),
            "seconds_per_step": sum(s.seconds for s in done) / max(len(done), 1),
            "rejected_steps": sum(s.rejected for s in steps),
            "dt_range": [min(s.dt for s in done), max(s.dt for s in done)] if done else None,
        }
        return result

    def _whole(self, state: TimeState) -> TimeState | None:
        """``state`` with its vectors gathered whole on the host (rank 0's; None elsewhere; collective)."""
        to_host, gather = self.backend.to_numpy, self.part.dist.gather
        whole = state.mapped(lambda v: gather(to_host(v)))
        return None if self.comm.rank else whole

    def _result(self, system, linear_solver, x_local, x, history, reason, residual, report) -> FlowResult:
        """The FlowResult of the state ``x_local`` (this rank's, host) of ``system``; with
        ``report`` the run's record (times, per-rank report: collective)."""
        return FlowResult(
            flow=self.flow,
            system=system,
            part=self.part,
            comm=self.comm,
            x_local=x_local,
            x=x,
            converged=reason == "converged",
            reason=reason,
            residual=residual,
            history=history,
            options={"nonlinear": asdict(self.nonlinear), "linear": asdict(self.linear)},
            times_s=system.phase_seconds() if report else {},
            per_rank=rank_report(self.comm, system, self.part, self.backend, linear_solver) if report else None,
            device=self.backend.describe(),
        )

    def _coarser_first(self, timer, log, progress):
        """Mesh sequencing: the flow solved on the meshes of ``coarser`` (finest first),
        coarsest first, the continuation's stages there, each mesh from the last one's
        solution interpolated; a mesh of at most REDUNDANT_MAX elements solved whole on every
        rank (the same steps everywhere). Returns (the initial guess on this rank's part of
        the mesh, a host array: the solve's copy is the one vector of it on the device; or
        None where the last coarse solve did not converge or was interrupted; a record per
        coarse mesh; and the time.perf_counter() where the last solve ended: the preparation
        of the next mesh, its guess interpolated, counts as data preparation from there). A
        mesh whose solve does not converge passes nothing on: the next finer one starts from
        rest with the continuation."""
        backend, comm, coarser, linear = self.backend, self.comm, self.coarser, self.linear
        re = self.flow.re

        def part_of(k):  # this rank's part of coarser[k].coarse, or of the mesh for k = -1
            if k < 0:
                return self.part
            m = coarser[k].coarse
            cut = SerialComm() if redundant(m) else comm  # a small mesh is solved whole on every rank
            return distribute(m, cut, backend, linear.alignment(m, cut.size))

        x, records, part, since = None, [], part_of(len(coarser) - 1), self.started
        for k in reversed(range(len(coarser))):
            c = coarser[k]
            t0 = time.perf_counter()
            system = partitioned_system(
                self.flow.problem_on(c.coarse),
                part,
                backend,
                linear.matrix_dtype,
                prepared_since=since,
                assembly=linear.assembly,
                timer=timer,
            )
            solver = NonlinearSolver(
                system,
                make_linear_solver(linear.for_mesh(c.coarse, part.dist.comm.size), progress),
                self.nonlinear if x is None else from_coarser(self.nonlinear),
                InterruptCheck(comm),
            )
            log(f"mesh sequencing: {c.coarse.n_elements} elements, {c.coarse.n_dofs} unknowns")
            done = solve_continuation(solver, self.stages if x is None else [], re, x, lambda line: log("  " + line))
            last = done[-1].result
            since = time.perf_counter()
            records.append(
                {
                    "elements": c.coarse.n_elements,
                    "unknowns": c.coarse.n_dofs,
                    "seconds": time.perf_counter() - t0,
                    "converged": last.converged and done[-1].re == re,
                    "stages": [s.as_dict() for s in done],
                }
            )
            if last.reason.startswith("interrupted"):
                return None, records, since
            finer = part_of(k - 1)
            if not records[-1]["converged"]:
                log(f"  not converged ({last.reason}): the next mesh starts from rest")
                x, part = None, finer
                continue
            whole = part.dist.gather(last.x, everyone=True)
            x = interpolate(backend.xp, whole, coarser[k - 1].coarse if k else self.flow.mesh, c, finer)
            x = finer.dist.sum_interface(finer.dist.owned_part(x))  # a shared entry: its owner's value on every rank
            part = finer
        return (None if x is None else backend.to_numpy(x)), records, since


def from_coarser(nonlinear: NonlinearOptions) -> NonlinearOptions:
    """The nonlinear options of a solve from a coarser mesh's solution: Newton from the first step."""
    return replace(nonlinear, newton=math.inf)


def in_time(nonlinear: NonlinearOptions) -> NonlinearOptions:
    """The nonlinear options of a time step: Newton from the first step (the guess, extrapolated
    from the steps before, is close), unless Picard alone was asked for (newton 0)."""
    return nonlinear if nonlinear.newton == 0 else replace(nonlinear, newton=math.inf)


def _solution(name: str, value, n_dofs: int) -> np.ndarray:
    """``value`` as a float64 vector of ``n_dofs`` finite numbers; InputError naming ``name``."""
    try:
        x = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be an array of {n_dofs} numbers (got {type(value).__name__})") from None
    if x.shape != (n_dofs,):
        raise InputError(f"{name} must hold {n_dofs} values for this mesh (got an array of shape {x.shape})")
    if not np.isfinite(x).all():
        raise InputError(f"{name} holds NaN or infinite values")
    return x
