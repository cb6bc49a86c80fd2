"""Command-line options shared by the fem3d entry points: device, nonlinear and linear solver."""

from __future__ import annotations

from ..kernels.ebe import MATRIX_DTYPES
from ..solvers.nonlinear import NonlinearOptions
from ..solvers.linear import SOLVERS, LinearOptions


def add_solver_arguments(ap, tol: float, max_steps: int | None = None, newton: float | None = None) -> None:
    """--device, the nonlinear options and the linear-solver options; ``tol``, ``max_steps``
    and ``newton`` are the entry point's defaults (None: NonlinearOptions')."""
    d, lin = NonlinearOptions(), LinearOptions()
    max_steps = d.max_steps if max_steps is None else max_steps
    newton = d.newton if newton is None else newton
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto: the GPU when CuPy sees one)")
    g = ap.add_argument_group("nonlinear solver")
    g.add_argument(
        "--tol",
        type=float,
        default=tol,
        help=f"relative residual of the equations that ends the solve, in (0, 1) (default {tol:g})",
    )
    g.add_argument("--max-steps", type=int, default=max_steps, help=f"limit of nonlinear steps (default {max_steps})")
    g.add_argument(
        "--newton",
        type=float,
        default=newton,
        help="take Newton steps once the relative residual is below this; 0 for Picard only (the paper's method), "
        f"inf for Newton from the start (default {newton:g})",
    )
    g.add_argument(
        "--anderson",
        type=int,
        default=d.anderson,
        help=f"Anderson mixing depth of Picard steps, 0 for plain Picard (default {d.anderson})",
    )
    g.add_argument("--relax", type=float, default=d.relax, help=f"Picard damping in (0, 1] (default {d.relax:g})")
    g.add_argument(
        "--forcing",
        type=float,
        default=d.forcing,
        help="inexact steps: each linear solve reduces its residual by this factor or more (after the first step "
        "by the Eisenstat-Walker rule), in (0, 1) (default 0.1 with --solver mg, 0.01 with paper)",
    )
    g.add_argument(
        "--keep-factor",
        type=float,
        default=d.keep_factor,
        help="mg solver: keep the preconditioner for the next Newton step when the last Newton step cut the residual "
        f"by at least this factor, >= 1; inf builds a new one every step (default {d.keep_factor:g})",
    )
    g = ap.add_argument_group("linear solver")
    g.add_argument(
        "--solver",
        default=lin.solver,
        help=f"{', '.join(SOLVERS)}: mg is FGMRES with monolithic geometric multigrid (boxes, refined meshes, block-structured "
        f"hexahedral meshes), paper the normal-equations Jacobi CG of Kao & Sheu; auto is mg (a mesh it cannot take is "
        f"an input error saying what to change). mg is 1.3-9.7x "
        f"faster on 20^3-40^3 at Re 100-1000 (benchmarks/results/bench_solvers_mg_vs_paper_h100.md) "
        f"(default {lin.solver})",
    )
    g.add_argument(
        "--max-linear",
        type=int,
        default=lin.max_iterations,
        help="Krylov iteration limit per linear solve (default 20000 for paper, 100 for mg)",
    )
    g.add_argument(
        "--check-every",
        type=int,
        default=lin.check_every,
        help=f"paper solver: CG iterations between residual checks (default {lin.check_every})",
    )
    g.add_argument(
        "--restart", type=int, default=lin.restart, help=f"mg solver: FGMRES restart length (default {lin.restart})"
    )
    g.add_argument(
        "--smoothing-steps",
        type=int,
        default=lin.smoothing_steps,
        help=f"mg solver: GMRES steps of each multigrid smoothing, 1 to 20 (default {lin.smoothing_steps})",
    )
    g.add_argument(
        "--rebuild-after",
        type=int,
        default=lin.rebuild_after,
        help=f"mg solver: keep the preconditioner for the next nonlinear step while a linear solve takes at most this "
        f"many iterations; 0 for no such rule (see --keep-factor) (default {lin.rebuild_after})",
    )
    g.add_argument(
        "--matrix-dtype",
        default="float64",
        help=f"storage of the element matrices: {' or '.join(MATRIX_DTYPES)} (half the memory and time per product; default float64)",
    )
    g.add_argument(
        "--assembly",
        default=lin.assembly,
        help="element: the linearisation stored as element matrices; partial: applied by sum factorisation, no "
        "element matrix kept (mg solver; about 60 instead of 135 kB per element on a GPU, so larger meshes "
        "fit, about 30 %% slower where both fit); auto: element where it fits, else partial "
        f"(default {lin.assembly})",
    )


def nonlinear_options(args) -> NonlinearOptions:
    """NonlinearOptions from parsed arguments (ranges checked there)."""
    return NonlinearOptions(
        tol=args.tol,
        max_steps=args.max_steps,
        newton=args.newton,
        anderson=args.anderson,
        relax=args.relax,
        forcing=args.forcing,
        keep_factor=args.keep_factor,
    )


def linear_options(args) -> LinearOptions:
    """LinearOptions from parsed arguments (ranges checked there)."""
    return LinearOptions(
        solver=args.solver,
        max_iterations=args.max_linear,
        check_every=args.check_every,
        matrix_dtype=args.matrix_dtype,
        assembly=args.assembly,
        restart=args.restart,
        smoothing_steps=args.smoothing_steps,
        rebuild_after=args.rebuild_after,
    )
