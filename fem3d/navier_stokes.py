"""The discrete steady incompressible Navier-Stokes equations on Q2-Q1 hexahedra.

A :class:`FlowProblem` (mesh, Reynolds number, prescribed velocities, body force) becomes,
on this rank's part of the mesh, a :class:`NavierStokesSystem`: the residual
F(x) = A(x) x - b(x) of the SUPG-weighted equations (fem3d.assembly) with the Dirichlet
rows F_k = x_k - g_k, and its linearisation about x kept as stored element matrices
(fem3d.operators.ElementOperator): the Picard matrix A(x) (convection and upwind weights
frozen at x, Kao & Sheu 2018) or the exact Jacobian J(x). Dirichlet rows are set inside
the element matrices (the paper's Algorithm 1). The pressure of an enclosed flow is
defined up to a constant: iterates are shifted to zero mean (integral of p = 0).

On several ranks each holds its part of the mesh (fem3d.partition): the same code, with
a Distribution that completes interface sums and reduces dot products.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .assembly import ReferenceTables, apply_dirichlet_rows, dirichlet_rows, element_matrices_chunk
from gpucfd.backend import PhaseTimer
from gpucfd.errors import InputError, check_range
from .fields import nodal_velocity, pressure_weights
from .kernels.ebe import matrix_storage
from .mesh import HexMesh
from .operators import ElementOperator
from .partition import Distribution

RE_MAX = 1e5  # largest Reynolds number accepted


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
        check_range("--re", self.re, low=0, high=RE_MAX, low_open=True)
        self.bc_nodes = np.asarray(self.bc_nodes, dtype=np.int64)
        self.bc_values = np.asarray(self.bc_values, dtype=np.float64).reshape(len(self.bc_nodes), 3)

    @classmethod
    def with_boundary_velocity(cls, mesh: HexMesh, re: float, velocity: Callable, tags=None, force=None) -> "FlowProblem":
        """Velocity velocity(x) -> (n, 3) at host points x (n, 3), prescribed at every Q2
        node of the boundary faces tagged ``tags`` (None: all boundary faces)."""
        nodes = mesh.boundary_nodes(tags)
        return cls(mesh, re, nodes, velocity(mesh.points[nodes]), force)

    def check_solvable(self) -> None:
        """InputError when the mesh has fewer free velocity unknowns than pressure unknowns
        (less one for the pressure level): such a discrete problem has no solution (one
        element of a cube, say)."""
        free = 3 * (self.mesh.n_nodes - len(np.unique(self.bc_nodes)))
        if free < self.mesh.n_pressure - 1:
            raise InputError(f"the mesh is too coarse: {free} free velocity unknowns for {self.mesh.n_pressure} pressure "
                             "unknowns leave the equations without a solution; use more elements (for the cube, --n 2 or more)")

    def restricted(self, mesh: HexMesh, nodes: np.ndarray) -> "FlowProblem":
        """The same flow on a part of the mesh: ``mesh``, whose Q2 node k is node
        ``nodes[k]`` (sorted) of this problem's mesh."""
        keep = np.isin(self.bc_nodes, nodes)
        return FlowProblem(mesh, self.re, np.searchsorted(nodes, self.bc_nodes[keep]), self.bc_values[keep], self.force)


@dataclass
class Linearisation:
    """The state of the equations at an iterate x, from one assembly.

    kind      "picard" (the stored element matrices hold A(x)) or "newton" (J(x))
    residual  F(x) (n,), complete on this rank (device)
    scale     (n,) 1 / (row norm of the Picard matrix A(x)): the weights of the residual norm
    norm      ||scale F(x)|| / ||scale b(x)||: the relative residual of the equations
    """

    kind: str
    residual: object
    scale: object
    norm: float


class NavierStokesSystem:
    """The equations of a FlowProblem on a backend (arrays on its device); with ``dist``
    (fem3d.partition.Distribution) on this rank's part of a distributed problem.

    matrix_dtype: storage of the element matrices, float64 or float32 (half the memory and
    bytes per product; the linear systems are then the rounded ones); chunk: elements per
    batch of element matrices (bounds the temporaries)."""

    def __init__(self, problem: FlowProblem, backend, dist=None, matrix_dtype: str = "float64", chunk: int | None = None):
        storage = matrix_storage(matrix_dtype)
        self.problem = problem
        self.backend = backend
        self.timer = PhaseTimer(backend)
        xp = self.xp = backend.xp
        mesh = self.mesh = problem.mesh
        with self.timer("setup"):
            self.dist = dist or Distribution.serial(backend, mesh.n_dofs)
            self.chunk = chunk or (8192 if backend.is_gpu else 128)  # CPU: temporaries of a few MB stay in the heap (fresh pages of larger ones cost more than the arithmetic)
            self.tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
            self.geometry = backend.asarray(mesh.geometry)
            self.cells = backend.asarray(mesh.cells)
            dofs = mesh.dofs()
            self.op = ElementOperator(backend, dofs, mesh.colour_offsets, mesh.n_dofs, self.dist, storage)
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
            self.dirichlet = dirichlet_rows(xp, self.op.dofs, self.fixed, self.valence)  # the prescribed rows, found once
            self.volume = self.dist.allreduce_scalar(float(self.p_weights.sum()))

    @property
    def n(self) -> int:
        """Unknowns of this rank's vector."""
        return self.mesh.n_dofs

    def initial_guess(self):
        """Prescribed boundary velocities, zero elsewhere."""
        return self.bc_values.copy()

    def impose_boundary_values(self, x) -> None:
        """Set the prescribed entries of ``x`` to their values, in place."""
        self.xp.copyto(x, self.bc_values, where=self.fixed)

    def assemble(self, x, kind: str) -> Linearisation:
        """Residual F(x) and, into the element matrices, A(x) (``kind`` "picard") or J(x)
        ("newton"), Dirichlet rows applied. The residual's weights are the row norms of the
        Picard matrix A(x) (1 / sqrt(S_k) for a prescribed row), whichever matrix is stored."""
        xp, mesh, op = self.xp, self.mesh, self.op
        vel = nodal_velocity(xp, x, mesh.n_nodes)
        residual = xp.zeros(mesh.n_dofs, dtype=np.float64)
        load = xp.zeros(mesh.n_dofs, dtype=np.float64)
        row_sq = xp.zeros(mesh.n_dofs, dtype=np.float64)
        direct = op.mats.dtype == np.float64  # else computed in float64, then rounded into the storage
        with self.timer("element_matrices"):
            for s in range(0, mesh.n_elements, self.chunk):
                e = slice(s, min(s + self.chunk, mesh.n_elements))
                dofs = op.dofs[e]
                mats, b_e, r_e, sq_e = element_matrices_chunk(xp, self.geometry[e], vel[self.cells[e]], self.problem.re,
                                                              self.tables, self.problem.force, x[dofs[:, 81:]],
                                                              jacobian=kind == "newton", out=op.mats[e] if direct else None)
                if not direct:
                    op.mats[e] = mats
                flat = dofs.ravel()
                for total, part in ((residual, r_e), (load, b_e), (row_sq, sq_e)):
                    self.backend.scatter_add(total, flat, part.ravel())  # CuPy's bincount reads its largest index back
            apply_dirichlet_rows(op.mats, self.dirichlet)
            for v in (residual, load, row_sq):
                self.dist.sum_interface(v)
            fixed = self.fixed  # copyto with a mask: no read-back of the mask's count, unlike boolean indexing
            xp.copyto(residual, x - self.bc_values, where=fixed)
            xp.copyto(load, self.bc_values, where=fixed)
            xp.copyto(row_sq, 1.0 / self.valence, where=fixed)
            scale = 1.0 / xp.sqrt(row_sq)
            b_norm = self.dist.norm(scale * load)
            norm = self.dist.norm(scale * residual) / (b_norm if b_norm > 0 else 1.0)
        return Linearisation(kind, residual, scale, norm)

    def normalise_pressure(self, x) -> None:
        """Shift the pressure block of ``x`` to zero mean, in place."""
        p = x[3 * self.mesh.n_nodes:]
        p -= self.dist.allreduce_scalar(float(self.p_weights @ p)) / self.volume
