"""Command-line options shared by the fem3d entry points (solver and device)."""
from __future__ import annotations

from .navier_stokes import PicardOptions


def add_solver_arguments(ap, tol: float, max_picard: int | None = None, newton: float | None = None) -> None:
    """--device and the Picard/CG options; ``tol``, ``max_picard`` and ``newton`` are the
    entry point's defaults (None: PicardOptions')."""
    d = PicardOptions()
    max_picard = d.max_picard if max_picard is None else max_picard
    newton = d.newton if newton is None else newton
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto: the GPU when CuPy sees one)")
    g = ap.add_argument_group("solver")
    g.add_argument("--tol", type=float, default=tol, help=f"Picard tolerance on the relative change of the solution (default {tol:g})")
    g.add_argument("--max-picard", type=int, default=max_picard, help=f"limit of Picard and Newton steps (default {max_picard})")
    g.add_argument("--anderson", type=int, default=d.anderson, help=f"Anderson acceleration depth, 0 for plain Picard (default {d.anderson})")
    g.add_argument("--relax", type=float, default=d.relax, help=f"Picard damping in (0, 1] (default {d.relax:g})")
    g.add_argument("--cg-tol", type=float, default=d.cg_tol, help=f"CG tolerance on the relative normal-equations residual (default {d.cg_tol:g})")
    g.add_argument("--max-cg", type=int, default=d.max_cg, help=f"CG iteration limit per Picard step (default {d.max_cg})")
    g.add_argument("--forcing", type=float, default=d.forcing,
                   help=f"inexact steps: CG stops once its residual fell by this factor, or at cg-tol; 0 for always cg-tol (default {d.forcing:g})")
    g.add_argument("--newton", type=float, default=newton,
                   help=f"switch from Picard to Newton steps once the relative change is below this, 0 for Picard only (default {newton:g})")
    g.add_argument("--check-every", type=int, default=10, help="CG iterations between residual checks (default 10)")
    g.add_argument("--matrix-dtype", default=d.matrix_dtype,
                   help=f"storage of the element matrices: float64 or float32 (half the memory and time per product; default {d.matrix_dtype})")


def solver_options(args) -> PicardOptions:
    """PicardOptions from parsed arguments (ranges checked there)."""
    return PicardOptions(tol=args.tol, max_picard=args.max_picard, relax=args.relax,
                         anderson=args.anderson, forcing=args.forcing, newton=args.newton, cg_tol=args.cg_tol, max_cg=args.max_cg,
                         check_every=args.check_every, matrix_dtype=args.matrix_dtype)
