"""Linear solvers of the linearised Navier-Stokes systems, as compositions of an operator, a
preconditioner and a Krylov method (fem3d.krylov).

Each has ``name``, ``setup(system, state)`` (after the system was assembled about an
iterate: fem3d.navier_stokes.NavierStokesSystem, Linearisation) and
``solve(rhs, x, rtol) -> fem3d.krylov.SolveInfo`` (x holds the initial guess). The
nonlinear solver (fem3d.nonlinear) only sees this interface.

``paper``  Kao & Sheu 2018: rows equilibrated to unit norm inside the element matrices,
           then Jacobi-preconditioned CG on the normal equations (Chronopoulos-Gear).
"""
from __future__ import annotations

from dataclasses import dataclass

from .assembly import row_norms_squared, scale_rows
from .errors import InputError, check_range
from .kernels.ebe import matrix_storage
from .krylov import NormalEquationsCG, NormalJacobi

SOLVERS = ("paper",)


@dataclass
class LinearOptions:
    """solver: one of SOLVERS; max_iterations: Krylov iterations per linear solve;
    check_every: CG iterations between residual checks (each reads one number back);
    matrix_dtype: storage of the element matrices (fem3d.kernels.ebe.MATRIX_DTYPES)."""

    solver: str = "paper"
    max_iterations: int = 20000
    check_every: int = 10
    matrix_dtype: str = "float64"

    def __post_init__(self):
        if self.solver not in SOLVERS:
            raise InputError(f"--solver must be one of {', '.join(SOLVERS)} (got {self.solver!r})")
        check_range("--max-linear", self.max_iterations, low=1, high=10**7, integer=True)
        check_range("--check-every", self.check_every, low=1, high=10**6, integer=True)
        matrix_storage(self.matrix_dtype)


class PaperSolver:
    """Equilibrated normal equations, Jacobi, Chronopoulos-Gear CG (Kao & Sheu 2018)."""

    name = "cg"

    def __init__(self, options: LinearOptions, progress=None):
        self.options, self.progress = options, progress
        self.precond = NormalJacobi()

    def setup(self, system, state) -> None:
        op = self.op = system.op
        row_sq = system.dist.sum_interface(row_norms_squared(op.xp, op.mats, op.dofs, op.n))
        self.scale = 1.0 / op.xp.sqrt(row_sq)
        scale_rows(op.mats, op.dofs, None, self.scale)
        self.precond.setup(op)

    def solve(self, rhs, x, rtol: float):
        cg = NormalEquationsCG(rtol, self.options.max_iterations, self.options.check_every, self.progress)
        return cg.solve(self.op, self.scale * rhs, x, self.precond)


def make_linear_solver(options: LinearOptions, progress=None):
    """The linear solver named by ``options.solver``; ``progress(iteration, relres)`` is
    called at its residual checks."""
    return {"paper": PaperSolver}[options.solver](options, progress)
