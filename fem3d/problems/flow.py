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

import os
import time
from dataclasses import dataclass, field

import numpy as np

from gpucfd.errors import InputError, check_range
from gpucfd.output import ensure_writable_dir, save_npy, write_json
from ..parallel.comm import setup
from .distributed import partition_balance, partitioned_system, rank_report, write_solution_vtu
from ..parallel.interrupt import InterruptCheck
from .navier_stokes import FlowProblem, run_timing
from ..solvers.nonlinear import NonlinearOptions, NonlinearSolver, continuation_steps, solve_continuation
from ..parallel.partition import distribute
from .quantities import boundary_force, point_values
from ..solvers.linear import LinearOptions, make_linear_solver


class Flow:
    """A steady incompressible flow on ``mesh`` (fem3d.discretisation.mesh.HexMesh) with kinematic
    viscosity ``nu`` (or Reynolds number ``re`` = 1/nu: give one), boundary conditions by
    tag ``boundaries`` {tag: fem3d.problems.boundary condition or its case-file spelling}, and an
    optional body force force(xp, x) -> (..., 3) at physical points (..., 3)."""

    def __init__(self, mesh, boundaries: dict, nu: float | None = None, re: float | None = None, force=None):
        if (nu is None) == (re is None):
            raise InputError("give the viscosity nu or the Reynolds number re (1/nu), one of them")
        if nu is not None:
            check_range("nu", nu, low=1e-5, high=1e5)
            re = 1.0 / nu
        self.mesh = mesh
        self.problem = FlowProblem.with_conditions(mesh, re, boundaries, force)
        self.problem.check_solvable()

    @property
    def re(self) -> float:
        return self.problem.re

    def solve(
        self,
        device="auto",
        comm="auto",
        nonlinear: NonlinearOptions | None = None,
        linear: LinearOptions | None = None,
        continuation: str = "none",
        initial=None,
        log=None,
        progress=None,
        started: float | None = None,
    ) -> "FlowResult":
        """Newton's method (fem3d.solvers.nonlinear) with the linear solver of ``linear`` (default:
        FGMRES and multigrid), on ``device`` (auto, cpu, gpu) and,
        under MPI, every rank of ``comm`` (auto, mpi, nccl; see fem3d.parallel.comm.setup), or
        on the backend and communicator that setup already made, given as ``device`` and
        ``comm``.
        ``continuation``: Reynolds numbers solved first (fem3d.solvers.nonlinear.continuation_steps);
        ``initial``: the whole solution (n_dofs,) to start from (an earlier run's, a restart);
        ``log(line)`` receives progress lines, ``progress(iteration, relres)`` the Krylov
        checks; ``started``: time.perf_counter() where the preparation of this run began
        (default: this call), e.g. before its mesh was read, so that reading it counts in
        the data preparation as the cavity command's building of its mesh does."""
        t_start = time.perf_counter() if started is None else started
        nonlinear = nonlinear or NonlinearOptions(tol=1e-8, max_steps=200, newton=1.0)
        backend, communicator = setup(device, comm) if isinstance(comm, str) else (device, comm)
        stages = continuation_steps(continuation, self.re)
        linear = linear or LinearOptions()
        linear = linear.for_mesh(self.mesh).resolved()
        part = distribute(self.mesh, communicator, backend, linear.alignment(self.mesh, communicator.size))
        system = partitioned_system(
            self.problem, part, backend, linear.matrix_dtype, prepared_since=t_start, assembly=linear.assembly
        )
        linear_solver = make_linear_solver(linear, progress)
        solver = NonlinearSolver(system, linear_solver, nonlinear, InterruptCheck(communicator))
        x0 = None if initial is None else np.asarray(initial, dtype=np.float64)[part.dist.gdofs]
        done = solve_continuation(solver, stages, self.re, x0, log)
        last = done[-1].result
        return FlowResult(
            flow=self,
            system=system,
            part=part,
            comm=communicator,
            x_local=last.x,
            x=part.dist.gather(last.x),
            converged=last.converged and done[-1].re == self.re,
            reason=last.reason,
            residual=last.residual,
            history=[s.as_dict() for s in done],
            options={"nonlinear": vars(nonlinear), "linear": vars(linear)},
            times_s=system.phase_seconds(),
            per_rank=rank_report(communicator, system, part, backend, linear_solver),
            device=backend.describe(),
        )


@dataclass
class FlowResult:
    """A solved flow. Quantities (forces, point values) are collective under MPI: call
    them on every rank; they return the same on each. ``x`` (the whole solution
    [u | v | w | p], host) is rank 0's; ``x_local`` this rank's part."""

    flow: Flow
    system: object
    part: object
    comm: object
    x_local: np.ndarray
    x: np.ndarray | None
    converged: bool
    reason: str
    residual: float
    history: list
    options: dict
    times_s: dict
    per_rank: list | None
    device: str
    quantities: dict = field(default_factory=dict)

    @property
    def steps(self) -> list:
        """Nonlinear steps of the final Reynolds number (fem3d.solvers.nonlinear.Step fields)."""
        return self.history[-1]["steps"]

    def timing(self) -> dict:
        """t_run_s, t_unit_us (over the nonlinear steps of every continuation stage, as
        T_run counts them all), wall_s and wall_since (fem3d.problems.navier_stokes.run_timing)."""
        return run_timing(self.times_s, sum(len(s["steps"]) for s in self.history), self.flow.mesh.n_elements)

    def force(self, tag: str) -> np.ndarray:
        """(3,) force of the fluid on the boundary faces tagged ``tag``."""
        return boundary_force(self.system, self.x_local, [tag])

    def coefficients(self, tag: str, reference_velocity: float, area: float) -> np.ndarray:
        """(3,) force coefficients 2 F / (U^2 A) (density 1) on ``tag``: drag along x, lift
        along y, and the z component."""
        check_range("reference_velocity", reference_velocity, low=0, low_open=True)
        check_range("area", area, low=0, low_open=True)
        return 2.0 * self.force(tag) / (reference_velocity**2 * area)

    def values(self, points) -> tuple[np.ndarray, np.ndarray]:
        """(velocity (P, 3), pressure (P,)) at physical points (P, 3), the points located once;
        NaN outside the mesh. The pressure level: an outflow fixes it; an enclosed flow's
        pressure has zero mean."""
        return point_values(self.part.mesh, self.x_local, points, self.comm)

    def velocity(self, points) -> np.ndarray:
        """(P, 3) velocity at physical points (P, 3); NaN outside the mesh."""
        return self.values(points)[0]

    def pressure(self, points) -> np.ndarray:
        """(P,) pressure at physical points (P, 3); NaN outside the mesh (level: :meth:`values`)."""
        return self.values(points)[1]

    def summary(self) -> dict:
        """What summary.json holds: the run, its convergence and the recorded quantities."""
        steps = self.steps
        mesh = self.flow.mesh
        return {
            "re": self.flow.re,
            "nu": 1.0 / self.flow.re,
            "converged": self.converged,
            "reason": self.reason,
            "residual": self.residual,
            "mesh": {"elements": mesh.n_elements, "velocity_nodes": mesh.n_nodes, "pressure_nodes": mesh.n_pressure},
            "dofs": mesh.n_dofs,
            "device": self.device,
            "ranks": self.comm.size,
            "communicator": self.comm.name,
            "nonlinear_steps": len(steps),
            "linear_iterations": sum(s["linear_iterations"] for s in steps),
            "linear_iterations_per_step": sum(s["linear_iterations"] for s in steps) / max(len(steps), 1),
            "quantities": self.quantities,
            "continuation": self.history,
            "times_s": self.times_s,
            **self.timing(),
            "per_rank": self.per_rank,
            "partition": partition_balance(self.per_rank),
            "options": self.options,
        }

    def write(self, out: str, vtu: bool = True, extra: dict | None = None) -> list[str]:
        """solution.npy, flow.vtu (flow_<rank>.vtu pieces and flow.pvtu on several ranks;
        none without ``vtu``) and summary.json (with ``extra`` merged in), each atomically,
        into the folder ``out``. Collective; returns the files written (rank 0; [] elsewhere)."""
        root = self.comm.rank == 0
        ensure_writable_dir(out)
        files = []
        if root:
            save_npy(os.path.join(out, "solution.npy"), self.x)
            files.append("solution.npy")
        if vtu:
            files.append(write_solution_vtu(out, "flow", self.part, self.x_local, self.comm))
        if not root:
            return []
        files.append("summary.json")
        write_json(os.path.join(out, "summary.json"), {**self.summary(), **(extra or {}), "files": files})
        return files
