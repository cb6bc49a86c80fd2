"""Command-line options shared by the tridiag flow cases (tridiag.cavity2d, tridiag.cylinder)."""
from __future__ import annotations

from .line_solver import SOLVERS


def add_flow_arguments(ap, out: str, unit: str) -> None:
    """--solver, --psi-sweeps, --check-every, --device, --dtype, --out (default ``out``), --no-plots,
    --quiet on ``ap``; ``unit`` names what a step is ("iteration" or "step")."""
    ap.add_argument("--solver", default="auto", help=f"line solver: {', '.join(SOLVERS)} (default auto)")
    ap.add_argument("--psi-sweeps", type=int, default=2,
                    help=f"ADI sweeps of the stream-function equation per {unit} (default 2)")
    ap.add_argument("--check-every", type=int, default=100,
                    help=f"{unit}s between progress lines and residual/divergence checks (default 100)")
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto: the GPU when CuPy sees one)")
    ap.add_argument("--dtype", default="float64", help="float64 or float32 (default float64)")
    ap.add_argument("--out", default=out, help=f"output directory (default {out})")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNG files")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
