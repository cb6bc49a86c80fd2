"""The discrete steady incompressible Navier-Stokes equations on Q2-Q1 hexahedra.

A :class:`FlowProblem` (mesh, Reynolds number, prescribed velocity components, body force)
becomes,
on this rank's part of the mesh, a :class:`NavierStokesSystem`: the residual
F(x) = A(x) x - b(x) of the SUPG-weighted equations (fem3d.discretisation.assembly) with the Dirichlet
rows F_k = x_k - g_k, and its linearisation about x kept as stored element matrices
(fem3d.solvers.operators.ElementOperator): the Picard matrix A(x) (convection and upwind weights
frozen at x, Kao & Sheu 2018) or the exact Jacobian J(x). Dirichlet rows are set inside
the element matrices (the paper's Algorithm 1). The pressure of an enclosed flow (no
outflow boundary) is defined up to a constant: its iterates are shifted to zero mean
(integral of p = 0); an outflow boundary fixes the level itself.

With ``assembly="partial"`` the products of the linearisation (the Krylov method's
operator) are applied by sum factorisation from point data instead
(fem3d.solvers.partial_assembly, as MFEM's partial assembly level), and no element matrix is
kept: :meth:`NavierStokesSystem.element_matrices` computes those of the last linearisation
for any elements on demand (multigrid's Galerkin product and smoother take them a chunk at a
time): 11 kB of point data per element instead of 63 kB of float64 matrices.

On several ranks each holds its part of the mesh (fem3d.parallel.partition): the same code, with
a Distribution that completes interface sums and reduces dot products.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..discretisation.assembly import ReferenceTables, dirichlet_rows, element_matrices_chunk
from .boundary import Constraints, outflow_and_inflow, constraints_by_tag
from gpucfd.backend import PhaseTimer, process_seconds
from gpucfd.errors import InputError, check_range
from gpucfd.sets import distinct
from ..discretisation.fields import nodal_velocity, pressure_weights
from ..kernels.ebe import colour_ranges, matrix_storage
from ..discretisation.mesh import HexMesh, element_dofs
from ..solvers.operators import ElementOperator
from ..solvers.partial_assembly import ASSEMBLIES, PartialAssemblyOperator
from ..parallel.partition import Distribution

RE_MAX = 1e5  # largest Reynolds number accepted
FLUX_TOL = 1e-10  # a closed domain's net boundary flux beyond this times the integral of |u| is an input error
RUN_PHASES = ("data_preparation", "element_matrices", "linear_setup", "solve")  # T_run: the paper's phases
LINEARISATIONS = ("picard", "newton", "frozen")  # A(x); J(x); J(x) with the test functions frozen at x (no derivative
# of SUPG's test functions: fem3d.discretisation.assembly.element_matrices_chunk)


@dataclass
class FlowProblem:
    """A flow to solve: prescribed velocity ``bc_values`` (n_b, 3) at the Q2 nodes
    ``bc_nodes`` (n_b,), in the components where ``bc_mask`` (n_b, 3) is True (default:
    all three); ``enclosed``: no outflow boundary, so the pressure level is free; body
    force force(xp, x) -> (..., 3) at physical points x (..., 3), or force(xp, x, t) at time t
    (or None). In time, ``prescribed_at(t)`` -> (n_b, 3) gives the prescribed values at t
    (None: ``bc_values`` at every t)."""

    mesh: HexMesh
    re: float
    bc_nodes: np.ndarray
    bc_values: np.ndarray
    force: Callable | None = None
    bc_mask: np.ndarray | None = None
    enclosed: bool = True
    prescribed_at: Callable | None = None

    @property
    def in_time(self) -> bool:
        """Its boundary values or force change in time."""
        return self.prescribed_at is not None or takes_time(self.force)

    def force_at(self, t: float):
        """The body force at time t, force(xp, x) (or None)."""
        force = self.force
        if not takes_time(force):
            return force
        return lambda xp, x: force(xp, x, t)

    def values_at(self, t: float) -> np.ndarray:
        """(n_b, 3) the prescribed values at time t."""
        return self.bc_values if self.prescribed_at is None else self.prescribed_at(t)

    def __post_init__(self):
        self.re = float(check_range("--re", self.re, low=0, high=RE_MAX, low_open=True))
        self.bc_nodes = np.asarray(self.bc_nodes, dtype=np.int64)
        if len(distinct(self.bc_nodes)) != len(self.bc_nodes):
            raise InputError("bc_nodes must not repeat a node: give each node's prescribed components once")
        self.bc_values = np.asarray(self.bc_values, dtype=np.float64).reshape(len(self.bc_nodes), 3)
        mask = np.ones((len(self.bc_nodes), 3), dtype=bool) if self.bc_mask is None else self.bc_mask
        self.bc_mask = np.asarray(mask, dtype=bool).reshape(len(self.bc_nodes), 3)

    @classmethod
    def with_boundary_velocity(
        cls, mesh: HexMesh, re: float, velocity: Callable, tags=None, force=None
    ) -> "FlowProblem":
        """Velocity velocity(x) -> (n, 3) at host points x (n, 3), prescribed at every Q2
        node of the boundary faces tagged ``tags`` (None: all boundary faces)."""
        nodes = mesh.boundary_nodes(tags)
        return cls(mesh, re, nodes, velocity(mesh.points_of(nodes)), force)

    @classmethod
    def with_conditions(cls, mesh: HexMesh, re: float, conditions: dict, force=None) -> "FlowProblem":
        """Boundary conditions by tag, {tag name: condition} (fem3d.problems.boundary: Wall(),
        Velocity(u, v, w), Outflow(), Slip(), or their case-file spellings); every
        boundary face must carry a tag with a condition."""
        return cls.with_constraints(mesh, re, constraints_by_tag(mesh, conditions), force)

    @classmethod
    def with_constraints(cls, mesh: HexMesh, re: float, c: Constraints, force=None) -> "FlowProblem":
        """The flow with the prescribed components ``c`` (fem3d.problems.boundary.Constraints)."""
        return cls(mesh, re, c.nodes, c.values, force, c.mask, c.enclosed, c.values_at if c.timed else None)

    def check_solvable(self) -> None:
        """InputError when the flow is not posed or its discrete equations have no solution:
        a velocity component that no boundary face prescribes (every face outflow, say: any
        constant may be added to it); a closed domain (no outflow) whose prescribed boundary
        velocity carries a net flux (an incompressible flow has none; beyond FLUX_TOL of the
        integral of |u|, by fem3d.problems.boundary.outflow_and_inflow); fewer free velocity
        unknowns than pressure unknowns (less one for the pressure level of an enclosed flow:
        one element of a cube, say)."""
        fixed = self.bc_mask.any(axis=0)
        if not fixed.any():
            raise InputError(
                "every boundary face is outflow: nothing holds or drives the fluid (any constant velocity may be "
                "added to a solution); make some tag a wall or a velocity"
            )
        if not fixed.all():
            free = [c for c, f in zip("uvw", fixed) if not f]
            them = "them" if len(free) > 1 else "it"
            raise InputError(
                f"no boundary face prescribes the velocity component{'s' * (len(free) > 1)} {' and '.join(free)} "
                f"(outflow and slip faces leave {them} free), so any constant may be added to {them}; make some tag "
                "a wall or a velocity"
            )
        free = 3 * self.mesh.n_nodes - int(self.bc_mask.sum())  # bc_nodes repeat no node
        if free < self.mesh.n_pressure - int(self.enclosed):
            raise InputError(
                f"the mesh is too coarse: {free} free velocity unknowns for {self.mesh.n_pressure} pressure "
                "unknowns leave the equations without a solution; use more elements (for the cube, --n 2 or more)"
            )
        if self.enclosed:
            order = np.argsort(self.bc_nodes)
            velocity = np.where(self.bc_mask, self.bc_values, 0.0)[order]
            out, into, size = outflow_and_inflow(self.mesh, self.bc_nodes[order], velocity)
            if abs(out - into) > FLUX_TOL * size:
                raise InputError(
                    f"net {'inflow' if into > out else 'outflow'} {abs(out - into):.6g} through the prescribed "
                    f"velocities of a closed domain ({into:.6g} in, {out:.6g} out; no outflow boundary): an "
                    "incompressible flow has none; make some tag an outflow or balance the velocities"
                )

    def restricted(self, mesh: HexMesh, nodes: np.ndarray) -> "FlowProblem":
        """The same flow on a part of the mesh: ``mesh``, whose Q2 node k is node
        ``nodes[k]`` (sorted) of this problem's mesh."""
        keep = np.isin(self.bc_nodes, nodes)
        whole = self.prescribed_at
        return FlowProblem(
            mesh,
            self.re,
            np.searchsorted(nodes, self.bc_nodes[keep]),
            self.bc_values[keep],
            self.force,
            self.bc_mask[keep],
            self.enclosed,
            None if whole is None else (lambda t: whole(t)[keep]),
        )


def takes_time(force) -> bool:
    """``force`` is a body force of the time, force(xp, x, t): it takes a third argument."""
    if force is None:
        return False
    try:
        parameters = inspect.signature(force).parameters.values()
    except (TypeError, ValueError):
        return False
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters) >= 3


@dataclass
class Linearisation:
    """The state of the equations at an iterate x, from one assembly.

    kind        "picard" (the stored element matrices hold A(x)) or "newton" (J(x))
    residual    F(x) (n,), complete on this rank (device)
    scale       (n,) 1 / (row norm of the Picard matrix A(x)): the weights of the residual norm
    norm        ||scale F(x)|| / ||scale b(x)||: the relative residual of the equations
    linearised  the stored matrices (or the sum-factorised operator) are those of x; False:
                still those of an earlier assembly (NavierStokesSystem.assemble)
    """

    kind: str
    residual: object
    scale: object
    norm: float
    linearised: bool = True


def run_timing(times: dict, steps: int, elements: int) -> dict:
    """summary.json's timing of a run with the seconds per phase ``times`` (phase_seconds)
    of ``steps`` nonlinear steps (every continuation stage's) on ``elements`` elements:
    t_run_s, the sum of RUN_PHASES (data preparation, element matrices, preconditioner,
    solves; each second in one); t_unit_us = t_run_s 1e6 / (steps elements), the paper's
    unit time; wall_s, the process's wall-clock seconds so far, and wall_since, what they
    count from (gpucfd.backend.process_seconds). t_run_s <= wall_s: the phases are
    disjoint intervals inside the process's life."""
    t_run = sum(times.get(k, 0.0) for k in RUN_PHASES)
    wall, since = process_seconds()
    return {
        "t_run_s": t_run,
        "t_unit_us": t_run * 1e6 / (max(steps, 1) * elements),
        "wall_s": wall,
        "wall_since": since,
    }


class Iterate:
    """A copy of an iterate x (n,) [u | v | w | p] in the layouts the element computations
    read: ``velocity`` (n_nodes, 3) and ``pressure`` (n_pressure,) (no copy of x besides)."""

    def __init__(self, xp, x, n_nodes: int):
        self.xp, self.n_nodes = xp, n_nodes
        self.velocity = nodal_velocity(xp, x, n_nodes)
        self.pressure = x[3 * n_nodes :].copy()

    def element_pressures(self, dofs):
        """(m, 8) the pressures of elements whose unknowns are ``dofs`` (m, NL)."""
        return self.pressure[dofs[:, 81:] - 3 * self.n_nodes]

    def equals(self, x) -> bool:
        """Whether ``x`` (n,) is this iterate, bit for bit (one read-back)."""
        xp, n = self.xp, self.n_nodes
        same = xp.array_equal(self.pressure, x[3 * n :]) & xp.array_equal(self.velocity, x[: 3 * n].reshape(3, n).T)
        return bool(same)


class NavierStokesSystem:
    """The equations of a FlowProblem on a backend (arrays on its device); with ``dist``
    (fem3d.parallel.partition.Distribution) on this rank's part of a distributed problem.

    matrix_dtype: storage of the element matrices, float64 or float32 (half the memory and
    bytes per product; the linear systems are then the rounded ones); chunk: elements per
    batch of element matrices (bounds the temporaries); assembly: one of ASSEMBLIES
    ("partial": none stored, whatever ``matrix_dtype``).

    ``op`` applies the linearisation (matvec, rmatvec); ``elements`` holds the element
    matrices (fem3d.solvers.operators.ElementOperator; ``op`` itself with "element"; None
    with "partial"); ``dofs`` (E, NL) int32 the unknowns of each element (device)."""

    def __init__(
        self,
        problem: FlowProblem,
        backend,
        dist=None,
        matrix_dtype: str = "float64",
        chunk: int | None = None,
        assembly: str = "element",
        timer: PhaseTimer | None = None,
    ):
        if assembly not in ASSEMBLIES:
            raise InputError(f"--assembly must be one of {', '.join(ASSEMBLIES)} (got {assembly!r})")
        storage = matrix_storage(matrix_dtype)
        self.problem = problem
        self.re = problem.re  # of the equations: a continuation's stage sets it, never the problem's
        self.backend = backend
        self.timer = timer or PhaseTimer(backend)
        xp = self.xp = backend.xp
        mesh = self.mesh = problem.mesh
        self.dist = dist or Distribution.serial(backend, mesh.n_dofs)
        self.chunk = chunk or (
            8192 if backend.is_gpu else 128
        )  # CPU: temporaries of a few MB stay in the heap (fresh pages of larger ones cost more than the arithmetic)
        self.tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
        self.geometry = backend.asarray(mesh.geometry)
        self.cells = backend.asarray(mesh.cells, dtype=np.int32)
        self.dofs = element_dofs(xp, self.cells, backend.asarray(mesh.pressure_cells), mesh.n_nodes, np.int32)
        self.elements = (
            ElementOperator(backend, self.dofs, mesh.colour_offsets, mesh.n_dofs, self.dist, storage)
            if assembly == "element"
            else None
        )
        rows, components = np.nonzero(problem.bc_mask)  # the prescribed components, row by row
        unknowns = components * mesh.n_nodes + problem.bc_nodes[rows]
        self._bc_entries = (rows, components)  # for _prescribed
        self.bc_unknowns = backend.asarray(unknowns)  # (n_b,) distinct: the prescribed unknowns
        fixed = np.zeros(mesh.n_dofs, dtype=bool)
        fixed[unknowns] = True
        self.fixed, self.bc_values = backend.asarray(fixed), self._prescribed(problem.values_at(0.0))
        self.force, self.sigma, self.tau_sigma, self.history = problem.force_at(0.0), 0.0, 0.0, None  # set_time
        # elements sharing each unknown (all ranks')
        self.valence = self.dist.sum_interface(backend.asarray(mesh.dof_valence()))
        self.p_weights = pressure_weights(backend, mesh)
        self.dirichlet = dirichlet_rows(xp, self.dofs, self.fixed, self.valence)  # the prescribed rows, found once
        self._linearised = None  # (Iterate, kind) of the last assembly that linearised
        self._version = 0  # of the equations: set_time changes them
        # ((version, re), Iterate, F(x), None) of the last residual computed; after an assembly, F(x) is its
        # residual with the prescribed rows set, and the last entry F(x)'s values in them (no copy of F(x) kept)
        self._evaluated = None
        self.bodies = {}  # force rows of boundary tag sets (fem3d.problems.quantities.boundary_force)
        self.op = self.elements if assembly == "element" else self._sum_factorised()
        self.volume = self.dist.allreduce_scalar(float(self.p_weights.sum()))

    def _prescribed(self, values):
        """(n_b,) device vector of the prescribed values ``values`` (n_b, 3) at bc_unknowns."""
        rows, components = self._bc_entries
        return self.backend.asarray(values[rows, components], dtype=np.float64)

    def set_time(
        self, sigma: float, history=None, force_t: float = 0.0, prescribed=None, tau_sigma: float | None = None
    ) -> None:
        """The equations of a time step: the time derivative approximated as sigma u - h
        (fem3d.discretisation.assembly.element_matrices_chunk), ``sigma`` in 1/s (0: steady),
        ``history`` (n_nodes, 3) device array of h or None; the body force at time ``force_t``;
        ``prescribed`` (n_b, 3) the prescribed values (None: unchanged); ``tau_sigma`` the time
        scale of tau's limit (None: sigma)."""
        self._version += 1
        self.sigma, self.history = float(sigma), history
        self.tau_sigma = self.sigma if tau_sigma is None else float(tau_sigma)
        self.force = self.problem.force_at(force_t)
        if prescribed is not None:
            self.bc_values = self._prescribed(prescribed)

    @property
    def n(self) -> int:
        """Unknowns of this rank's vector."""
        return self.mesh.n_dofs

    def phase_seconds(self) -> dict:
        """Seconds per phase of this system's timer (RUN_PHASES first, in their order):
        disjoint intervals, each second in one phase (gpucfd.backend.PhaseTimer).
        data_preparation is charged by whoever prepared the run, the construction of this
        system included (fem3d.problems.distributed.partitioned_system)."""
        times = self.timer.as_dict()
        return {**{k: times[k] for k in RUN_PHASES if k in times}, **times}

    def initial_guess(self):
        """Prescribed boundary velocities, zero elsewhere."""
        x = self.xp.zeros(self.n, dtype=np.float64)
        self.impose_boundary_values(x)
        return x

    def impose_boundary_values(self, x) -> None:
        """Set the prescribed entries of ``x`` to their values, in place."""
        x[self.bc_unknowns] = self.bc_values

    def assemble(self, x, kind: str, linearise: bool = True) -> Linearisation:
        """Residual F(x) and the linearisation A(x) (``kind`` "picard") or J(x) ("newton"),
        Dirichlet rows applied: into the element matrices, or the sum-factorised operator's
        point data. The residual's weights are the row norms of the Picard matrix A(x)
        (1 / sqrt(S_k) for a prescribed row), whichever matrix is stored. With ``linearise``
        False the residual alone (no Jacobian terms, no matrices written); the operator stays
        that of the last linearisation."""
        xp = self.xp
        with self.timer("element_matrices"):
            stored = self.elements is not None and linearise
            at = Iterate(xp, x, self.mesh.n_nodes)  # for both records below (neither is written to)
            residual, load, row_sq = self._element_sums(at, kind == "newton" and stored, store=stored)
            if linearise:  # what element_matrices() computes the matrices of
                self._linearised = (at, kind)
                if not stored:
                    self._linearise(self.op, at, kind)
            bc, values = self.bc_unknowns, self.bc_values  # index arrays: no read-back, unlike boolean masks
            self._evaluated = ((self._version, self.re), at, residual, residual[bc])
            residual[bc] = x[bc] - values
            load[bc] = values
            row_sq[bc] = 1.0 / self.valence[bc]
            scale = 1.0 / xp.sqrt(row_sq)
            b_norm = self.dist.norm(scale * load)
            norm = self.dist.norm(scale * residual) / (b_norm if b_norm > 0 else 1.0)
        return Linearisation(kind, residual, scale, norm, linearise)

    def partial_assembly(
        self, x, kind: str, scale=None, chunk: int | None = None, points_dtype=None
    ) -> PartialAssemblyOperator:
        """The operator that assemble(x, kind) stores, A(x) ("picard") or J(x) ("newton")
        with the Dirichlet rows, by sum factorisation instead (fem3d.solvers.partial_assembly;
        ``chunk`` elements per NumPy batch, ``points_dtype`` its point data's, default
        float32); with ``scale`` (n,) the row-weighted D A, as the stored one after
        scale_rows(op.mats, op.dofs, None, scale)."""
        at = Iterate(self.xp, x, self.mesh.n_nodes)
        return self._linearise(self._sum_factorised(chunk, points_dtype), at, kind, scale)

    @property
    def linearisation_kind(self) -> str | None:
        """The kind ("picard" or "newton") of the last assembly that linearised; None before one."""
        return None if self._linearised is None else self._linearised[1]

    def _sum_factorised(self, chunk: int | None = None, points_dtype=None) -> PartialAssemblyOperator:
        return PartialAssemblyOperator(
            self.backend, self.dofs, self.mesh.colour_offsets, self.n, self.dirichlet, self.dist, chunk, points_dtype
        )

    def _linearise(self, op: PartialAssemblyOperator, x: Iterate, kind: str, scale=None) -> PartialAssemblyOperator:
        """``op`` linearised at the iterate ``x``."""
        op.linearise(
            self.geometry,
            x.velocity,
            self.cells,
            self.re,
            self.tables,
            self.force,
            x.element_pressures(self.dofs),
            kind == "newton",
            scale,
            self.sigma,
            self.history,
            self.tau_sigma,
        )
        return op

    def element_matrices(self, ids, kind: str | None = None):
        """(m, NL, LD) float64 element matrices of the local elements ``ids`` (m,) (device
        integers) at the last assemble()'s iterate, prescribed rows applied: of that
        assembly's kind (what it stores with element assembly), or of ``kind`` (LINEARISATIONS);
        computed on demand (the element matrices' cost again)."""
        x, last = self._linearised
        kind = kind or last
        dofs = self.dofs[ids]
        return element_matrices_chunk(
            self.xp,
            self.geometry[ids],
            x.velocity[self.cells[ids]],
            self.re,
            self.tables,
            self.force,
            x.element_pressures(dofs),
            jacobian=kind != "picard",
            prescribed=(dofs, self.fixed, self.valence),
            sigma=self.sigma,
            history=None if self.history is None else self.history[self.cells[ids]],
            tau_sigma=self.tau_sigma,
            frozen=kind == "frozen",
        )[0]

    def equation_residual(self, x):
        """F(x) (n,) of the discrete equations in every row, the prescribed ones too (where
        a row's test function is the basis function of a prescribed unknown: the residual
        whose sum over a body's rows is the force on it, fem3d.forces); complete on this
        rank; not to be changed. The stored element matrices are left as they are. The last
        assembly's, where ``x`` and the equations are those it was computed at (a run's
        forces at each solve's last iterate, whose convergence test computed it)."""
        key = (self._version, self.re)
        if self._evaluated is not None:
            at_key, at, residual, prescribed = self._evaluated
            if at_key == key and at.equals(x):
                if prescribed is not None:  # the assembly's residual with its own prescribed rows
                    residual = residual.copy()
                    residual[self.bc_unknowns] = prescribed
                    self._evaluated = (key, at, residual, None)
                return residual
        at = Iterate(self.xp, x, self.mesh.n_nodes)
        residual = self._element_sums(at, False, store=False)[0]
        self._evaluated = (key, at, residual, None)
        return residual

    def _element_sums(self, x: Iterate, jacobian: bool, store: bool):
        """(residual, load, squared Picard row norms) (n,) at the iterate ``x`` summed over the
        elements and the ranks, before the prescribed rows are set; with ``store`` the element
        matrices (J(x) with ``jacobian``, else A(x)) are written into the operator. Chunks lie
        in one colour, whose elements share no unknown: each adds into the sums race-free, in
        place."""
        xp, mesh, op = self.xp, self.mesh, self.elements
        sums = [xp.zeros(mesh.n_dofs, dtype=np.float64) for _ in range(3)]
        direct = store and op.mats.dtype == np.float64  # else computed in float64, then rounded into the storage
        chunks = [
            (s, min(s + self.chunk, b)) for a, b in colour_ranges(mesh.colour_offsets) for s in range(a, b, self.chunk)
        ]
        for s, t in chunks:
            e = slice(s, t)
            dofs = self.dofs[e]
            mats, b_e, r_e, sq_e = element_matrices_chunk(
                xp,
                self.geometry[e],
                x.velocity[self.cells[e]],
                self.re,
                self.tables,
                self.force,
                x.element_pressures(dofs),
                jacobian=jacobian,
                out=op.mats[e] if direct else None,
                matrices=store,
                prescribed=(dofs, self.fixed, self.valence),
                sigma=self.sigma,
                history=None if self.history is None else self.history[self.cells[e]],
                tau_sigma=self.tau_sigma,
            )
            if store and not direct:
                op.mats[e] = mats
            at = dofs.ravel()
            for total, part in zip(sums, (r_e, b_e, sq_e)):
                total[at] += part.ravel()
        for v in sums:
            self.dist.sum_interface(v)
        return sums

    def normalise_pressure(self, x) -> None:
        """Shift the pressure block of ``x`` to zero mean, in place (an enclosed flow's; an
        outflow fixes the level of the others)."""
        if not self.problem.enclosed:
            return
        p = x[3 * self.mesh.n_nodes :]
        p -= self.dist.allreduce_scalar(float(self.p_weights @ p)) / self.volume
