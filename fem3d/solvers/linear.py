"""Linear solvers of the linearised Navier-Stokes systems, as compositions of an operator, a
preconditioner and a Krylov method (fem3d.solvers.krylov).

Each has ``name``, ``forcing`` (the largest relative tolerance of a linear solve that
suits its Krylov method, fem3d.solvers.nonlinear.forcing_term), ``rebuild_after`` (None when
every linearisation needs its own preconditioner; else the nonlinear solver may keep the
preconditioner of an earlier linearisation: after a Newton step that converged fast
(fem3d.solvers.nonlinear.NonlinearOptions.keep_factor) and, when it is not 0, while the last
solve took at most this many iterations), ``setup(system, state, rebuild)`` (after the
system was assembled about an iterate: fem3d.problems.navier_stokes.NavierStokesSystem,
Linearisation; ``rebuild`` False keeps the preconditioner built before) and
``solve(rhs, x, rtol, max_iterations=None) -> fem3d.solvers.krylov.SolveInfo`` (x holds the
initial guess; rhs is the solver's to overwrite: no copy of it is made). The nonlinear
solver (fem3d.solvers.nonlinear) only sees this interface.

``mg``     flexible GMRES on the row-scaled system, preconditioned by one V-cycle of
           monolithic geometric multigrid with element-Vanka smoothing (fem3d.solvers.multigrid);
           needs a hierarchy (a refined mesh, fem3d.discretisation.refine, then coarser boxes
           where it is or refines a structured box, else its sheets paired,
           fem3d.discretisation.coarsen) whose coarsest level's direct solve fits the host's
           memory (fem3d.solvers.multigrid.direct_fits), and more than one element.
``paper``  Kao & Sheu 2018: rows equilibrated to unit norm inside the element matrices,
           then Jacobi-preconditioned CG on the normal equations (Chronopoulos-Gear).
``auto``   mg; a mesh mg cannot solve is an input error that says what to change
           (:meth:`LinearOptions.for_mesh`): the paper solver only where it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import math
from dataclasses import replace

import numpy as np

from ..discretisation.assembly import row_norms_squared, scale_rows
from gpucfd.errors import InputError
from ..kernels.ebe import MATRIX_DTYPES
from gpucfd.options import setting, spelt, validate
from .krylov import FGMRES, NormalEquationsCG, NormalJacobi, SolveInfo
from .line_vanka import SMOOTHERS
from .partial_assembly import ASSEMBLIES
from .multigrid import (
    SMOOTHING_STEPS,
    Multigrid,
    alignment,
    chain,
    coarse_levels,
    coarsest_size,
    direct_fits,
    direct_limit,
    superlu_bytes,
)
from gpucfd.backend import host_free_bytes

SOLVERS = ("auto", "mg", "paper")
REBUILD_AFTER = 0  # mg: iterations of a linear solve up to which its preconditioner serves the next step too; off:
# a kept preconditioner fails where the flow changes fast (docs/solvers.md, keeping the preconditioner)


@dataclass
class LinearOptions:
    """solver: one of SOLVERS; max_iterations: Krylov iterations per linear solve (None:
    the solver's own limit, ``max_iterations`` of its class);
    check_every: CG iterations between residual checks (each reads one number back);
    matrix_dtype: storage of the element matrices (fem3d.kernels.ebe.MATRIX_DTYPES);
    assembly: the linearisation's products (fem3d.solvers.partial_assembly.ASSEMBLIES:
    stored element matrices, or "partial", sum factorisation with no element matrix kept:
    mg's), or "auto": chosen by the memory check of the commands
    (fem3d.problems.memory.fitting_assembly), element elsewhere (:meth:`resolved`);
    restart: FGMRES restart length; smoothing_steps: GMRES steps of each multigrid
    smoothing; smoother: the levels' smoother (fem3d.solvers.line_vanka.SMOOTHERS);
    rebuild_after: mg keeps its preconditioner for the next linearisation while a solve
    takes at most this many iterations (0: no such rule; the nonlinear solver also keeps it
    after a fast Newton step, NonlinearOptions.keep_factor)."""

    solver: str = setting(
        "auto",
        "mg is FGMRES with monolithic geometric multigrid (boxes, refined meshes, block-structured hexahedral "
        "meshes), paper the normal-equations Jacobi CG of Kao & Sheu; auto is mg (a mesh it cannot take is an input "
        "error saying what to change)",
        choices=SOLVERS,
    )
    max_iterations: int | None = setting(
        None,
        "Krylov iteration limit per linear solve; not given: 20000 for paper, 100 for mg",
        low=1,
        high=10**7,
        integer=True,
        optional=True,
        flag="--max-linear",
    )
    check_every: int = setting(
        10, "paper solver: CG iterations between residual checks", low=1, high=10**6, integer=True
    )
    matrix_dtype: str = setting(
        "float64",
        "storage of the element matrices (float32: half the memory and time per product)",
        choices=tuple(MATRIX_DTYPES),
    )
    assembly: str = setting(
        "auto",
        "element: the linearisation stored as element matrices; partial: applied by sum factorisation, no element "
        "matrix kept (mg solver; about 60 instead of 135 kB per element on a GPU, so larger meshes fit, about 30 %% "
        "slower where both fit); auto: element where it fits, else partial",
        choices=("auto",) + ASSEMBLIES,
    )
    restart: int = setting(50, "mg solver: FGMRES restart length", low=1, high=1000, integer=True)
    smoothing_steps: int = setting(
        SMOOTHING_STEPS, "mg solver: GMRES steps of each multigrid smoothing", low=1, high=20, integer=True
    )
    smoother: str = setting(
        "line",
        "mg solver: line (line Vanka on the levels with cells more than 8 times longer than thick, element Vanka on "
        "the others) or element (element Vanka on every level)",
        choices=SMOOTHERS,
    )
    rebuild_after: int = setting(
        REBUILD_AFTER,
        "mg solver: keep the preconditioner for the next nonlinear step while a linear solve takes at most this many "
        "iterations; 0 for no such rule (see --keep-factor)",
        low=0,
        high=1000,
        integer=True,
    )

    def __post_init__(self):
        validate(self)
        if self.assembly == "partial" and self.solver == "paper":
            raise InputError(
                f"{spelt('assembly', self)} partial needs {spelt('solver', self)} mg or auto (the "
                "paper solver works on stored element matrices)"
            )

    def for_mesh(self, mesh, ranks: int = 1) -> "LinearOptions":
        """These options with ``auto`` resolved for ``mesh`` solved by ``ranks`` ranks (mg);
        InputError, saying what to change, where mg cannot solve it (:func:`mg_refusal`) unless
        paper was asked for."""
        if self.solver == "paper":
            return self
        why = mg_refusal(mesh, ranks)
        if why:
            solver = spelt("solver", self)
            raise InputError(f"{solver} {self.solver}: {why}; or use {solver} paper, much slower")
        return replace(self, solver="mg")

    def resolved(self) -> "LinearOptions":
        """These options with an "auto" assembly taken as element (stored matrices)."""
        return replace(self, assembly="element") if self.assembly == "auto" else self

    def alignment(self, mesh, ranks: int) -> int:
        """Element layers per partition unit (fem3d.parallel.partition.distribute) for this solver."""
        return alignment(mesh, ranks) if self.solver == "mg" else 1


def mg_refusal(mesh, ranks: int = 1) -> str | None:
    """Why mg cannot solve ``mesh`` (a whole mesh or one rank's part; a whole mesh on ``ranks``
    ranks: fem3d.solvers.multigrid.chain) and what to change; None where it can. One
    element's matrix is singular where its velocity is prescribed (spurious pressure modes,
    which the paper solver's least squares tolerates); the coarsest level of the hierarchy is
    solved directly, so its factors must fit the host."""
    whole = mesh.whole or mesh
    if whole.n_elements == 1:
        return "the mesh has one element, too few for multigrid: refine it"
    elements, n = coarsest_size(mesh, ranks)
    if direct_fits(n):
        return None
    last = chain(mesh, ranks)[-1]
    last = last.whole or last
    most = int(direct_limit() * last.n_elements / last.n_dofs)
    return (
        f"the coarsest level of the multigrid hierarchy has {n:,} unknowns ({elements:,} elements), whose direct "
        f"solve needs about {superlu_bytes(n) / 1e9:.2g} GB, more than half the {host_free_bytes() / 1e9:.2g} GB free: "
        f"give a coarser mesh (about {most:,} elements at most) and --refine K"
    )


class PaperSolver:
    """Equilibrated normal equations, Jacobi, Chronopoulos-Gear CG (Kao & Sheu 2018)."""

    name = "cg"
    max_iterations = 20000  # CG iterations per solve unless LinearOptions.max_iterations is given
    forcing = 1e-2  # largest linear tolerance of a nonlinear step: with 0.1, Newton took twice the steps at 8^3, Re 400
    rebuild_after = None  # the rows are equilibrated inside each new set of element matrices

    def __init__(self, options: LinearOptions, progress=None):
        self.options, self.progress = options, progress
        self.precond = NormalJacobi()

    def setup(self, system, state, rebuild: bool = True) -> None:
        op = self.op = system.op
        row_sq = system.dist.sum_interface(row_norms_squared(op.xp, op.mats, op.dofs, op.n))
        self.scale = 1.0 / op.xp.sqrt(row_sq)
        scale_rows(op.mats, op.dofs, None, self.scale)
        self.precond.setup(op)

    def solve(self, rhs, x, rtol: float, max_iterations: int | None = None):
        limit = max_iterations or self.options.max_iterations or self.max_iterations
        cg = NormalEquationsCG(rtol, limit, self.options.check_every, self.progress)
        return cg.solve(self.op, self.op.xp.multiply(self.scale, rhs, out=rhs), x, self.precond)


class _RowScaled:
    """The operator D A of an operator A (matvec) and row weights D (n,)."""

    def __init__(self, op, scale):
        self.op, self.scale = op, scale
        self.xp, self.dist, self.backend, self.n = op.xp, op.dist, op.backend, op.n

    def matvec(self, x, out):
        self.op.matvec(x, out)
        out *= self.scale
        return out


class LeftNull:
    """The unit left null vector y of D A for an enclosed flow (``scale`` (n,) the row
    weights D), kept by its nonzero entries: those of A's are 1 on the pressure (continuity)
    rows and, on each prescribed row k (a unit row), minus the sum of the continuity rows'
    entries in column k (the continuity rows of a free velocity column sum to the integral
    of div N_k, zero); D A's is that divided by D."""

    def __init__(self, system, scale):
        op, xp, dist = system.op, system.xp, system.dist
        first = 3 * system.mesh.n_nodes
        ones = xp.zeros(op.n, dtype=np.float64)
        ones[first:] = 1.0
        column_sums = op.rmatvec(ones, xp.empty_like(ones))
        bc = system.bc_unknowns
        self.at = xp.concatenate([xp.arange(first, op.n), bc])
        values = xp.concatenate([ones[first:], -column_sums[bc]]) / scale[self.at]
        self.dist = dist
        self.owned = values if dist.is_serial else dist.weights[self.at] * values  # counts every unknown once
        norm = math.sqrt(dist.allreduce_scalar(float(self.owned @ values)))
        self.values, self.owned = values / norm, self.owned / norm

    def remove_from(self, b) -> None:
        """b -= (y . b) y, in place."""
        b[self.at] -= self.dist.allreduce_scalar(float(self.owned @ b[self.at])) * self.values


class _Unscaled:
    """A preconditioner M of A used for D A: applies M to D^-1 r, which it writes into ``out``
    first (no vector more: a multigrid cycle reads its right-hand side before it writes out)."""

    def __init__(self, precond, scale):
        self.precond, self.scale = precond, scale

    def apply(self, r, out):
        self.precond.xp.divide(r, self.scale, out=out)
        return self.precond.apply(out, out)


class MultigridSolver:
    """Flexible GMRES preconditioned by a V-cycle of monolithic geometric multigrid
    (fem3d.solvers.multigrid), on the system with rows weighted like the nonlinear residual
    (Linearisation.scale), so that its relative residual is the one the Newton forcing
    asks for. The hierarchy is built at the first setup; a setup with ``rebuild``
    recomputes the coarse matrices and smoothers of the new linearisation, one without
    keeps those of the last rebuild and only refreshes the finest level's matrices
    (fem3d.solvers.multigrid.Multigrid.refresh)."""

    name = "fgmres"
    max_iterations = 100  # FGMRES iterations per solve unless LinearOptions.max_iterations is given: two restart
    # cycles; multigrid needs under 30 where Newton converges (40^3 box at Re 1000: at most 8; the DFG case refined 3
    # times: at most 9), so a solve that needs more marks a linearisation Newton cannot use (fem3d.solvers.nonlinear
    # stops after LINEAR_FAILURES such steps in a row)
    forcing = 0.1  # largest linear tolerance of a nonlinear step: 0.1 against 0.01 took 50 instead of 76 iterations
    # (8^3, Re 1000)

    def __init__(self, options: LinearOptions, progress=None):
        self.options, self.progress = options, progress
        self.rebuild_after = options.rebuild_after
        self.mg, self.system, self.ready = None, None, False

    def setup(self, system, state, rebuild: bool = True) -> None:
        if self.system is not system:
            why = next((r for r in system.dist.comm.allgather(mg_refusal(system.mesh)) if r), None)  # every rank alike
            if why:
                raise InputError(f"--solver mg: {why}")
            self.mg = Multigrid(system, coarse_levels(system.mesh), self.options.smoothing_steps, self.options.smoother)
            self.system, self.ready = system, False
        if rebuild or not self.ready:
            self.ready = self.mg.setup()
        else:
            self.mg.refresh()
        self.scale = state.scale
        self.op = _RowScaled(system.op, state.scale)
        self.left_null = LeftNull(system, state.scale) if system.problem.enclosed else None

    def traffic(self) -> dict | None:
        """The hierarchy's V-cycles and per-level interface sums (Multigrid.traffic), None before a set-up."""
        return None if self.mg is None else self.mg.traffic()

    def solve(self, rhs, x, rtol: float, max_iterations: int | None = None):
        """Solve A x = rhs to ``rtol`` in the weighted norm (rhs overwritten by D rhs). The part
        of the right-hand side that the singular matrix of an enclosed flow cannot produce
        (round-off in the continuity residual, along the left null vector) is removed first,
        so that small tolerances stay reachable."""
        if not self.ready:
            return SolveInfo(0, "breakdown", math.inf)
        b = self.op.xp.multiply(self.scale, rhs, out=rhs)
        if self.left_null is not None:
            self.left_null.remove_from(b)
        limit = max_iterations or self.options.max_iterations or self.max_iterations
        fgmres = FGMRES(rtol, self.options.restart, limit, self.progress)
        return fgmres.solve(self.op, b, x, _Unscaled(self.mg, self.scale))


def make_linear_solver(options: LinearOptions, progress=None):
    """The linear solver named by ``options.solver`` (auto resolved first:
    LinearOptions.for_mesh); ``progress(iteration, relres)`` is called at its residual
    checks."""
    if options.solver == "auto":
        raise ValueError("resolve --solver auto with LinearOptions.for_mesh first")
    return {"paper": PaperSolver, "mg": MultigridSolver}[options.solver](options, progress)
