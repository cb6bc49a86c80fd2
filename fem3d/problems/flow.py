"""The Python API: a flow as a user describes it, solved, and what it gives back.

    import fem3d
    mesh = fem3d.read_mesh("meshes/dfg3d/channel_coarse.msh")
    flow = fem3d.Flow(mesh, nu=1e-3, boundaries={
        "inflow": fem3d.Velocity("16*0.45*y*z*(0.41-y)*(0.41-z)/0.41**4", 0, 0),
        "walls": fem3d.Wall(), "cylinder": fem3d.Wall(), "outflow": fem3d.Outflow()})
    result = flow.solve(device="auto")
    result.force("cylinder")                 # (Fx, Fy, Fz), by the residual (volume) integral
    result.pressure([[0.45, 0.2, 0.205]])    # point values
    result.write("out")                      # solution.npy, flow.vtu, summary.json

Under ``mpirun -n P`` every rank runs the same lines: each solves on its part of the mesh
(one GPU per rank), and what a result returns is the same on every rank (``x``, the whole
solution, is rank 0's alone). Density is 1; the Reynolds number of the equations is 1/nu.
"""

from __future__ import annotations

from gpucfd.errors import InputError, check_range
from ..discretisation.mesh import HexMesh
from ..parallel.comm import setup
from ..solvers.linear import LinearOptions
from ..solvers.nonlinear import NonlinearOptions
from ..solvers.time_stepping import TimeOptions
from gpucfd.options import build
from .navier_stokes import RE_MAX, FlowProblem
from .result import FlowResult
from .simulation import Simulation


class Flow:
    """An incompressible flow, steady or in time, on ``mesh`` (fem3d.discretisation.mesh.HexMesh) with kinematic
    viscosity ``nu`` (or Reynolds number ``re`` = 1/nu: give one), boundary conditions by
    tag ``boundaries`` {tag: fem3d.problems.boundary condition or its case-file spelling; velocity
    expressions may use the time t}, and an optional body force force(xp, x) -> (..., 3) at
    physical points (..., 3), or force(xp, x, t) at time t. A solve never
    changes it: ``re`` is what was given, and a second solve gives the same answer."""

    def __init__(self, mesh, boundaries: dict, nu: float | None = None, re: float | None = None, force=None):
        _check_mesh(mesh)
        if not isinstance(boundaries, dict):
            raise InputError(f"boundaries= must be a dict {{tag: condition}} (got {type(boundaries).__name__})")
        if force is not None and not callable(force):
            raise InputError(
                f"force= must be a function force(xp, x) or force(xp, x, t) -> (..., 3), or None (got "
                f"{type(force).__name__})"
            )
        if (nu is None) == (re is None):
            raise InputError("give the viscosity nu= or the Reynolds number re= (1/nu), one of them")
        if nu is not None:
            re = 1.0 / float(check_range("nu=", nu, low=1e-5, high=1e5))
        re = float(check_range("re=", re, low=0, high=RE_MAX, low_open=True))
        self._pose(mesh, re, lambda m: FlowProblem.with_conditions(m, re, boundaries, force))
        self.boundaries = boundaries

    @classmethod
    def posed(cls, mesh, re: float, problem_on) -> "Flow":
        """The flow at Reynolds number ``re`` whose equations on ``mesh`` or any mesh of its
        hierarchy (mesh sequencing's coarser meshes) are ``problem_on(mesh)``, a
        fem3d.problems.navier_stokes.FlowProblem at ``re`` (e.g. the lid-driven cavity's,
        fem3d.problems.lid_driven); its ``boundaries`` are {} (no conditions by tag)."""
        _check_mesh(mesh)
        flow = cls.__new__(cls)
        flow._pose(mesh, re, problem_on)
        return flow

    def _pose(self, mesh, re: float, problem_on) -> None:
        self.mesh, self.problem_on, self.boundaries = mesh, problem_on, {}
        self.problem = problem_on(mesh)
        self._re = self.problem.re
        self.problem.check_solvable()

    @property
    def re(self) -> float:
        """The Reynolds number 1/nu (as given; a continuation's stages are the solver's)."""
        return self._re

    def simulation(
        self,
        device="auto",
        comm="auto",
        nonlinear: NonlinearOptions | None = None,
        linear: LinearOptions | None = None,
        continuation: str = "none",
        sequence: str = "none",
        initial=None,
        started: float | None = None,
        time=None,
        resume=None,
    ) -> Simulation:
        """The run of this flow (fem3d.problems.simulation.Simulation), checked and planned,
        on ``device`` (auto, cpu, gpu) and, under MPI, every rank of ``comm`` (auto, mpi,
        nccl; fem3d.parallel.comm.setup), or on the backend and communicator that setup
        already made, given as ``device`` and ``comm``; the other keywords as :meth:`solve`
        describes them."""
        for name, value in (("continuation", continuation), ("sequence", sequence)):
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise InputError(f'{name}= must be a string such as "none" or "auto" (got {type(value).__name__})')
        for name, value, cls in (("nonlinear", nonlinear, NonlinearOptions), ("linear", linear, LinearOptions)):
            if value is not None and not isinstance(value, cls):
                raise InputError(f"{name}= must be a {cls.__name__} or None (got {type(value).__name__})")
        if isinstance(time, dict):
            time = build(TimeOptions, time)
        elif time is not None and not isinstance(time, TimeOptions):
            raise InputError(
                f"time= must be a TimeOptions, a dict of its settings (t_end, dt, scheme) or None (got "
                f"{type(time).__name__})"
            )
        backend, communicator = setup(device, comm) if isinstance(comm, str) else (device, comm)
        extra = {} if nonlinear is None else {"nonlinear": nonlinear}
        return Simulation(
            self,
            backend,
            communicator,
            linear=linear or LinearOptions(),
            continuation=continuation,
            sequence=str(sequence),
            initial=initial,
            started=started,
            time=time,
            resume=resume,
            **extra,
        )

    def solve(self, log=None, progress=None, on_step=None, **run) -> FlowResult:
        """Newton's method (fem3d.solvers.nonlinear) with the linear solver of ``linear``
        (default: FGMRES and multigrid): the run of :meth:`simulation` with the keywords ``run``
        (device, comm, nonlinear, linear; ``continuation``: Reynolds numbers solved first,
        fem3d.solvers.nonlinear.continuation_steps; ``sequence``: coarser meshes of the
        hierarchy solved first, none, auto or a count, fem3d.solvers.sequencing.plan;
        ``initial``: the whole solution (n_dofs,) to start from, an earlier run's; ``started``:
        time.perf_counter() where the preparation of this run began, default this call, e.g.
        before its mesh was read, so that reading it counts in the data preparation; ``time``:
        the time stepping of an unsteady run, fem3d.TimeOptions or a dict of its settings,
        e.g. {"t_end": 8, "dt": 0.01, "scheme": "bdf2"}), solved. ``log(line)`` receives
        progress lines, ``progress(iteration, relres)`` the Krylov checks, ``on_step(step,
        state)`` each time step (fem3d.solvers.time_stepping.TimeStep and a FlowResult of its
        state, whose force(), values() and flux() measure it)."""
        return self.simulation(**run).run(log=log, progress=progress, on_step=on_step)


def _check_mesh(mesh) -> None:
    if not isinstance(mesh, HexMesh):
        raise InputError(
            f"mesh= must be a mesh: fem3d.read_mesh(path) or fem3d.box_mesh(n) (got {type(mesh).__name__})"
        )
