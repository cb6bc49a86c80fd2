"""Command-line options and limits shared by the tridiag commands (tridiag.cases.heat, tridiag.cases.cavity2d,
tridiag.cases.cylinder) and the scripts that run them.

Limits: MAX_STEPS iterations or time steps per run (beyond it a run is a hang, not a
computation); Reynolds numbers in RE_RANGE (below, the viscous coefficients dwarf the
time step and no default step converges; above, the central-difference steady and unsteady
runs diverge); at most MAX_PSI_SWEEPS ψ sweeps per step.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import resolve_dtype
from gpucfd.errors import check_range

from .line_solver import LAYOUT_NAMES, NAMES, check_solver

MAX_STEPS = 10**9
RE_RANGE = (1e-3, 1e5)
MAX_PSI_SWEEPS = 1000


def add_flow_arguments(ap, out: str, unit: str) -> None:
    """--solver, --layout, --psi-sweeps, --check-every, --device, --dtype, --out (default ``out``),
    --no-plots, --quiet on ``ap``; ``unit`` names what a step is ("iteration" or "step")."""
    add_line_solver_arguments(ap, "auto")
    ap.add_argument(
        "--psi-sweeps",
        type=int,
        default=2,
        help=f"ADI sweeps of the stream-function equation per {unit} (1..{MAX_PSI_SWEEPS}; default 2)",
    )
    ap.add_argument(
        "--check-every",
        type=int,
        default=100,
        help=f"{unit}s between progress lines and residual/divergence checks (default 100)",
    )
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto: the GPU when CuPy sees one)")
    ap.add_argument("--dtype", default="float64", help="float64 or float32 (default float64)")
    ap.add_argument("--out", default=out, help=f"output directory (default {out})")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNG files")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")


def add_line_solver_arguments(ap, default: str) -> None:
    """--solver and --layout (tridiag.cases.line_solver), the line solver of every 2D command."""
    ap.add_argument(
        "--solver",
        default=default,
        help=f"line solver: {', '.join(NAMES)} (default {default}: the fastest measured, on a GPU fused "
        "for the flows where the lines fit and tuned for heat, thomas on the CPU; the library "
        "solvers build the rows and solve them by that tridiag.solve method; tuned is "
        "tridiag.solve's measured choice)",
    )
    ap.add_argument(
        "--layout",
        default="auto",
        help=f"storage of the library solvers' x-/y-line systems: {', '.join(LAYOUT_NAMES)} (natural: "
        "contiguous x-lines, interleaved y-lines, no transposes; contiguous: y-lines transposed; "
        "interleaved: x-lines transposed; auto: interleaved for pta, natural for thomas, else contiguous)",
    )


def check_flow_arguments(args) -> np.dtype:
    """Check the options the flow cases share (--re, --tol and those of :func:`add_flow_arguments`);
    returns the field dtype. InputError naming the first bad one."""
    check_range("--re", args.re, *RE_RANGE)
    check_solver(args.solver, args.layout)
    check_range("--psi-sweeps", args.psi_sweeps, 1, MAX_PSI_SWEEPS, integer=True)
    check_range("--check-every", args.check_every, 1, MAX_STEPS, integer=True)
    dtype = resolve_dtype(args.dtype)
    if args.tol is not None:
        check_tolerance("--tol", args.tol, float(np.finfo(dtype).eps))
    return dtype


def check_tolerance(name: str, tol: float, floor: float = 0.0) -> float:
    """A relative tolerance: at least ``floor`` (e.g. the round-off of the field dtype; else > 0)
    and below 1 (every state would pass)."""
    return check_range(name, tol, floor, 1, low_open=floor == 0, high_open=True)
