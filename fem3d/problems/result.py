"""The one record of a finished run, whatever the front door (fem3d.problems.simulation): the
solution on this rank's part and gathered, the convergence, the history of the continuation
and of mesh sequencing, the times, and the quantities users ask of it (forces, point values);
:meth:`FlowResult.summary` is what summary.json holds and :meth:`FlowResult.write` writes it
with the solution.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np

from gpucfd.errors import InputError, check_range, first_few, shown
from gpucfd.output import claim_output, ensure_writable_dir, save_npy, write_json
from ..parallel.comm import agreed_errors
from .distributed import partition_balance, solution_vtu_patterns, write_solution_vtu
from .navier_stokes import run_timing
from .quantities import boundary_force, flow_rates, flux, point_values


@dataclass
class FlowResult:
    """A solved flow. Quantities (forces, point values) are collective under MPI: call
    them on every rank; they return the same on each. ``x`` (the whole solution
    [u | v | w | p], host) is rank 0's; ``x_local`` this rank's part. ``history``: per
    Reynolds number solved, its re, convergence and steps (fem3d.solvers.nonlinear.Stage);
    ``sequence``: per coarser mesh solved first, coarsest first; ``finished``:
    time.perf_counter() when the solve ended (the output's time counts from it);
    ``mesh_info``: how the mesh was made, for the summary (a front end's, e.g. the box).
    An unsteady run's ``x`` is the state at the last step reached (``time``: "t"), its
    ``converged`` that every step's solve converged up to t_end, and ``history`` is empty."""

    flow: object  # fem3d.problems.flow.Flow
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
    sequence: list = field(default_factory=list)
    finished: float = field(default_factory=time.perf_counter)
    mesh_info: dict = field(default_factory=dict)
    quantities: dict = field(default_factory=dict)
    time: dict | None = None  # an unsteady run's: its TimeOptions, the time reached, step counts
    time_steps: list = field(default_factory=list)  # an unsteady run's fem3d.solvers.time_stepping.TimeStep

    @property
    def steps(self) -> list:
        """Nonlinear steps of the final Reynolds number (fem3d.solvers.nonlinear.Step fields)."""
        return self.history[-1]["steps"]

    def timing(self) -> dict:
        """t_run_s, t_unit_us (over the nonlinear steps of every continuation stage, as
        T_run counts them all), wall_s and wall_since (fem3d.problems.navier_stokes.run_timing)."""
        return run_timing(self.times_s, self._counts()[0], self.flow.mesh.n_elements)

    def _counts(self) -> tuple[int, int, int]:
        """(nonlinear steps, Newton steps, linear iterations) of the run: every continuation
        stage's, or every time step's."""
        if self.time is not None:
            newton = self.time["newton_steps"]
            return newton, newton, self.time["linear_iterations"]
        steps = [s for stage in self.history for s in stage["steps"]]
        return len(steps), sum(s["kind"] == "newton" for s in steps), sum(s["linear_iterations"] for s in steps)

    def force(self, tag: str) -> np.ndarray:
        """(3,) force of the fluid on the boundary faces tagged ``tag``."""
        names = self.flow.mesh.tag_names
        if not isinstance(tag, str) or tag not in names:
            raise InputError(f"tag= must be a boundary tag of the mesh: {first_few(sorted(names))} (got {shown(tag)})")
        return boundary_force(self.system, self.x_local, [tag])

    def coefficients(self, tag: str, reference_velocity: float, area: float) -> np.ndarray:
        """(3,) force coefficients 2 F / (U^2 A) (density 1) on ``tag``: drag along x, lift
        along y, and the z component."""
        check_range("reference_velocity=", reference_velocity, low=0, low_open=True)
        check_range("area=", area, low=0, low_open=True)
        return 2.0 * self.force(tag) / (reference_velocity**2 * area)

    def flux(self, through: str) -> float:
        """Flux of the velocity through ``through``: a boundary tag (outward: an inflow is
        negative) or a plane "x=VALUE" (y, z; toward +x), by Gauss rules on the faces or the
        plane's cut (fem3d.problems.quantities.flux)."""
        return flux(self.part.mesh, self.x_local, through, self.comm, "through=")

    def flow_rates(self) -> dict:
        """{tag: {"nominal": Q, "delivered": Q_h}} of each velocity boundary condition (outward
        fluxes): Q of the prescribed expressions, Q_h of the values the discrete problem
        imposes, zero where walls took the nodes (fem3d.problems.quantities.flow_rates); at
        the time reached by a run in time."""
        t = 0.0 if self.time is None else self.time["t"]
        return flow_rates(self.system.problem, self.flow.boundaries, self.comm, t)

    def values(self, points) -> tuple[np.ndarray, np.ndarray]:
        """(velocity (P, 3), pressure (P,)) at physical points (P, 3), the points located once;
        NaN outside the mesh. The pressure level: an outflow fixes it; an enclosed flow's
        pressure has zero mean."""
        try:
            at = np.asarray(points, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"points= must be physical points (P, 3) (got {shown(points)})") from None
        at = at.reshape(1, 3) if at.shape == (3,) else at
        if at.ndim != 2 or at.shape[1] != 3 or not np.isfinite(at).all():
            raise InputError(f"points= must be finite physical points (P, 3) (got an array of shape {at.shape})")
        return point_values(self.part.mesh, self.x_local, at, self.comm)

    def velocity(self, points) -> np.ndarray:
        """(P, 3) velocity at physical points (P, 3); NaN outside the mesh."""
        return self.values(points)[0]

    def pressure(self, points) -> np.ndarray:
        """(P,) pressure at physical points (P, 3); NaN outside the mesh (level: :meth:`values`)."""
        return self.values(points)[1]

    def summary(self) -> dict:
        """What summary.json holds: the run, its convergence (the steps of every Reynolds
        number and coarser mesh solved) and the recorded quantities; ``times_s`` with the
        output's seconds so far."""
        mesh = self.flow.mesh
        steps, newton, its = self._counts()
        return {
            "re": self.flow.re,
            "nu": 1.0 / self.flow.re,
            "converged": self.converged,
            "reason": self.reason,
            "residual": self.residual,
            "mesh": {
                **self.mesh_info,
                "elements": mesh.n_elements,
                "velocity_nodes": mesh.n_nodes,
                "pressure_nodes": mesh.n_pressure,
                "colours": mesh.n_colours,
            },
            "dofs": mesh.n_dofs,
            "device": self.device,
            "ranks": self.comm.size,
            "communicator": self.comm.name,
            "nonlinear_steps": steps,
            "newton_steps": newton,
            "linear_iterations": its,
            "linear_iterations_per_step": its / max(steps, 1),
            "quantities": self.quantities,
            "continuation": self.history,
            **({} if self.time is None else {"time": self.time}),
            "sequence": self.sequence,
            "times_s": {**self.times_s, "output": time.perf_counter() - self.finished},
            **self.timing(),
            "per_rank": self.per_rank,
            "partition": partition_balance(self.per_rank),
            "options": self.options,
        }

    def write(
        self, out: str, vtu: bool = True, extra: dict | None = None, stem: str = "flow", claimed: bool = False
    ) -> list[str]:
        """:meth:`write_solution`, then summary.json (with ``extra`` merged in), each atomically,
        into the folder ``out``, which is claimed for the writing (gpucfd.output.claim_output:
        refused while another run holds it; an earlier run's solution files removed) unless the
        caller holds it (``claimed``, a program's run). Collective; returns the files written
        (rank 0; [] elsewhere)."""
        with ExitStack() as held:
            if not claimed:
                with agreed_errors(self.comm):  # every rank writes after rank 0 claimed the folder
                    if self.comm.rank == 0:
                        held.enter_context(claim_output(out, self.stale_files(stem), option="out="))
            files = self.write_solution(out, vtu, stem)
            if self.comm.rank:
                return []
            files.append("summary.json")
            self.write_summary(out, files, extra)
            return files

    @staticmethod
    def stale_files(stem: str = "flow") -> list[str]:
        """Glob patterns of the files a run writes (and an earlier run leaves stale) besides its
        pictures: solution.npy, the solution's VTU files on any number of ranks, summary.json."""
        return ["solution.npy", *solution_vtu_patterns(stem), "summary.json"]

    def write_solution(self, out: str, vtu: bool = True, stem: str = "flow") -> list[str]:
        """solution.npy (the whole [u | v | w | p], the input of a restart) and ``stem``.vtu
        (``stem``_<rank>.vtu pieces and ``stem``.pvtu on several ranks; none without ``vtu``),
        each atomically, into the folder ``out`` (made if missing). Collective; returns the
        files written (rank 0; [] elsewhere)."""
        root = self.comm.rank == 0
        ensure_writable_dir(out)
        files = []
        if root:
            save_npy(os.path.join(out, "solution.npy"), self.x)
            files.append("solution.npy")
        if vtu:
            files.append(write_solution_vtu(out, stem, self.part, self.x_local, self.comm))
        return files if root else []

    def write_summary(self, out: str, files: list, extra: dict | None = None) -> dict:
        """summary.json (atomically) in ``out``: :meth:`summary` with ``extra`` merged in and
        the ``files`` on disk; returns its content (rank 0)."""
        summary = {**self.summary(), **(extra or {}), "files": list(files)}
        write_json(os.path.join(out, "summary.json"), summary)
        return summary
