"""Steady incompressible Navier-Stokes on Q2-Q1 hexahedra by Picard iteration.

Each Picard step freezes the convecting velocity at the previous iterate, computes
the element matrices (fem3d.assembly) with the Dirichlet rows set inside them
(Algorithm 1 of Kao & Sheu 2018), and solves the linear system by normal-equations
Jacobi PCG (fem3d.krylov) warm-started from the previous iterate. The pressure of
an enclosed flow is defined up to a constant: the least-squares solve needs no
pinning, and every iterate is shifted to zero mean (integral of p over the domain = 0).

On several ranks each solves on its part of the mesh (fem3d.partition): the same
code, with a Distribution that completes interface sums and reduces dot products.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .anderson import Anderson
from .assembly import ReferenceTables, apply_dirichlet_rows, element_matrices_chunk, row_norms_squared, scale_rows
from .backend import PhaseTimer
from .errors import InputError, check_range
from .fields import nodal_velocity, pressure_weights
from .kernels.ebe import MATRIX_DTYPES, NL
from .krylov import normal_pcg
from .mesh import HexMesh
from .operators import ElementOperator
from .partition import Distribution


@dataclass
class FlowProblem:
    """A steady flow to solve: prescribed velocity ``bc_values`` (n_b, 3) at the Q2 nodes
    ``bc_nodes`` (n_b,), body force force(xp, x) -> (..., 3) at physical points (or None)."""

    mesh: HexMesh
    re: float
    bc_nodes: np.ndarray
    bc_values: np.ndarray
    force: Callable | None = None

    def __post_init__(self):
        check_range("--re", self.re, low=0, low_open=True)
        self.bc_nodes = np.asarray(self.bc_nodes, dtype=np.int64)
        self.bc_values = np.asarray(self.bc_values, dtype=np.float64).reshape(len(self.bc_nodes), 3)

    @classmethod
    def with_boundary_velocity(cls, mesh: HexMesh, re: float, velocity: Callable, tags=None, force=None) -> "FlowProblem":
        """Velocity velocity(x) -> (n, 3) at host points x (n, 3), prescribed at every Q2
        node of the boundary faces tagged ``tags`` (None: all boundary faces)."""
        nodes = mesh.boundary_nodes(tags)
        return cls(mesh, re, nodes, velocity(mesh.points[nodes]), force)

    def restricted(self, mesh: HexMesh, nodes: np.ndarray) -> "FlowProblem":
        """The same flow on a part of the mesh: ``mesh``, whose Q2 node k is node
        ``nodes[k]`` (sorted) of this problem's mesh."""
        keep = np.isin(self.bc_nodes, nodes)
        return FlowProblem(mesh, self.re, np.searchsorted(nodes, self.bc_nodes[keep]), self.bc_values[keep], self.force)


@dataclass
class PicardOptions:
    """tol: relative change ||x_k+1 - x_k|| / ||x_k+1|| that ends the Picard loop;
    relax, anderson: damping and depth of the Anderson acceleration of the Picard
    fixed point (fem3d.anderson; depth 0 and relax 1: the paper's plain Picard);
    forcing: inexact steps, CG stops once its residual fell by this factor (or reached
    cg_tol; 0: always cg_tol); newton: once the change falls below this, switch from Picard
    to Newton steps (fem3d.assembly, newton=True) for the rest of the solve (0: never);
    cg_tol, max_cg, check_every: passed to fem3d.krylov.normal_pcg; chunk: elements
    per batch of element matrices (memory bound); diverge: stop when the nonlinear
    residual exceeds this factor times its first value; matrix_dtype: storage of the
    element matrices, float64 or float32 (half the memory and bytes per product; the
    solution is then that of the rounded system)."""

    tol: float = 1e-8
    max_picard: int = 30
    relax: float = 1.0
    anderson: int = 5
    forcing: float = 1e-2
    newton: float = 0.0
    cg_tol: float = 1e-10
    max_cg: int = 20000
    check_every: int = 1
    chunk: int | None = None
    diverge: float = 1e6
    matrix_dtype: str = "float64"

    def __post_init__(self):
        check_range("--tol", self.tol, low=0, low_open=True)
        check_range("--max-picard", self.max_picard, low=1, integer=True)
        check_range("--relax", self.relax, low=0, high=1, low_open=True)
        check_range("--anderson", self.anderson, low=0, integer=True)
        check_range("--forcing", self.forcing, low=0)
        check_range("--newton", self.newton, low=0)
        check_range("--cg-tol", self.cg_tol, low=0, low_open=True)
        check_range("--max-cg", self.max_cg, low=1, integer=True)
        check_range("--check-every", self.check_every, low=1, integer=True)
        if self.matrix_dtype not in MATRIX_DTYPES:
            raise InputError(f"--matrix-dtype must be one of {', '.join(MATRIX_DTYPES)} (got {self.matrix_dtype!r})")


@dataclass
class PicardStep:
    step: int
    kind: str  # "picard" or "newton"
    residual: float  # ||b(x_k) - A(x_k) x_k|| / ||b(x_k)|| (row-equilibrated system) before the step's solve
    change: float  # ||x_k+1 - x_k|| / ||x_k+1||
    cg_iterations: int
    cg_reason: str
    cg_relres: float
    seconds: float


@dataclass
class PicardResult:
    x: np.ndarray  # final iterate on the host, layout [u | v | w | p]
    converged: bool
    reason: str  # converged, max_picard, or the CG reason (nan, breakdown, max_iterations), diverged
    steps: list = field(default_factory=list)
    times: dict = field(default_factory=dict)

    @property
    def cg_iterations(self) -> int:
        return sum(s.cg_iterations for s in self.steps)


class PicardSolver:
    """Picard iteration for a FlowProblem on a backend (arrays live on its device).

    With ``dist`` (fem3d.partition.Distribution) the problem is this rank's part of a
    distributed one; default: one process."""

    def __init__(self, problem: FlowProblem, backend, options: PicardOptions | None = None, dist=None):
        self.problem = problem
        self.backend = backend
        self.options = options or PicardOptions()
        self.timer = PhaseTimer(backend)
        xp = self.xp = backend.xp
        mesh = self.mesh = problem.mesh
        with self.timer("setup"):
            self.dist = dist or Distribution.serial(backend, mesh.n_dofs)
            self.chunk = self.options.chunk or (8192 if backend.is_gpu else 1024)
            self.tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
            self.geometry = backend.asarray(mesh.geometry)
            self.cells = backend.asarray(mesh.cells)
            dofs = mesh.dofs()
            self.op = ElementOperator(backend, dofs, mesh.colour_offsets, mesh.n_dofs, self.dist,
                                     MATRIX_DTYPES[self.options.matrix_dtype])
            n, nd = mesh.n_nodes, mesh.n_dofs
            nodes, values = problem.bc_nodes, problem.bc_values
            fixed = np.zeros(nd, dtype=bool)
            bc = np.zeros(nd)
            for d in range(3):
                fixed[d * n + nodes] = True
                bc[d * n + nodes] = values[:, d]
            self.fixed, self.bc_values = backend.asarray(fixed), backend.asarray(bc)
            # elements sharing each unknown (all ranks')
            self.valence = self.dist.sum_interface(backend.asarray(np.bincount(dofs.ravel(), minlength=nd).astype(np.float64)))
            self.p_weights = pressure_weights(backend, mesh)
            self.volume = self.dist.allreduce_scalar(float(self.p_weights.sum()))
        self.b = xp.zeros(nd, dtype=np.float64)

    def initial_guess(self):
        """Prescribed boundary velocities, zero elsewhere."""
        return self.bc_values.copy()

    def assemble(self, x, newton: bool = False):
        """Element matrices and right-hand side of the system linearised about ``x``
        (Picard, or Newton with ``newton``)."""
        xp, mesh, op = self.xp, self.mesh, self.op
        vel = nodal_velocity(xp, x, mesh.n_nodes)
        self.b.fill(0.0)
        row_sq = xp.zeros(mesh.n_dofs, dtype=np.float64)
        for s in range(0, mesh.n_elements, self.chunk):
            e = slice(s, min(s + self.chunk, mesh.n_elements))
            dofs = op.dofs[e]
            x_e = x[dofs]
            mats, rhs, res = element_matrices_chunk(xp, self.geometry[e], vel[self.cells[e]], self.problem.re, self.tables,
                                                    self.problem.force, x_e[:, 81:] if newton else None, jacobian=newton)
            if newton:  # J x_new = J x - F(x)
                rhs = (mats[:, :, :NL] @ x_e[..., None])[..., 0] - res
            apply_dirichlet_rows(xp, mats, dofs, self.fixed, self.valence)
            row_sq += row_norms_squared(xp, mats, dofs, mesh.n_dofs)
            op.mats[e] = mats
            self.b += xp.bincount(dofs.ravel(), weights=rhs.ravel(), minlength=mesh.n_dofs)
        self.dist.sum_interface(self.b)
        self.b[self.fixed] = self.bc_values[self.fixed]
        self.dist.sum_interface(row_sq)
        scale_rows(op.mats, op.dofs, self.b, 1.0 / xp.sqrt(row_sq))
        return self.b

    def normalise_pressure(self, x):
        """Shift the pressure block of ``x`` to zero mean, in place."""
        p = x[3 * self.mesh.n_nodes:]
        p -= self.dist.allreduce_scalar(float(self.p_weights @ p)) / self.volume

    def solve(self, x0=None, log: Callable[[str], None] | None = print, cg_progress=None) -> PicardResult:
        """Picard loop from ``x0`` (default: initial_guess); returns the last iterate.

        log(line) receives one line per Picard step; cg_progress(iteration, relres) is
        called at each CG residual check."""
        xp, opt, op, dist = self.xp, self.options, self.op, self.dist
        x = self.initial_guess() if x0 is None else self.backend.asarray(x0, dtype=np.float64).copy()
        work = xp.empty_like(x)
        mixer = Anderson(opt.anderson, opt.relax, dist.dot)
        steps, reason, first_residual, newton = [], "max_picard", None, False
        for k in range(1, opt.max_picard + 1):
            t0 = time.perf_counter()
            with self.timer("element_matrices"):
                b = self.assemble(x, newton)
            with self.timer("preconditioner"):
                diag = op.normal_diagonal()
                inv_diag = xp.where(diag > 0, 1.0 / xp.where(diag > 0, diag, 1.0), 0.0)
            with self.timer("solve"):
                residual = dist.norm(b - op.matvec(x, work)) / dist.norm(b)
                first_residual = residual if first_residual is None else first_residual
                x_new = x.copy()
                info = normal_pcg(op, b, x_new, inv_diag, opt.cg_tol, opt.max_cg, opt.check_every, cg_progress, opt.forcing)
                self.normalise_pressure(x_new)
                change = dist.norm(x_new - x) / dist.norm(x_new)
                x_new = mixer.step(x, x_new)
            x = x_new
            step = PicardStep(k, "newton" if newton else "picard", residual, change, info.iterations, info.reason, info.relres,
                              time.perf_counter() - t0)
            steps.append(step)
            if log:
                log(f"{step.kind} {k:3d}  residual {residual:.3e}  change {change:.3e}  cg {info.iterations:6d} it "
                    f"({info.reason}, relres {info.relres:.1e})  {step.seconds:7.2f} s")
            if not newton and change < opt.newton:
                newton, mixer = True, Anderson(0)
            if info.reason in ("nan", "breakdown") or not math.isfinite(change):
                reason = info.reason if info.reason in ("nan", "breakdown") else "nan"
                break
            if residual > opt.diverge * first_residual:
                reason = "diverged"
                break
            if change < opt.tol and info.converged:
                reason = "converged"
                break
        return PicardResult(self.backend.to_numpy(x), reason == "converged", reason, steps, self.timer.as_dict())
