"""The 2D lid-driven cavity as a vorticity–stream-function problem: grid, boundary data, default
time step, wall relaxation and tolerance.

The unit square, lid y = 1 moving in +x at speed 1, no-slip walls elsewhere; n × n cells
((n+1)² nodes, h = 1/n); fields (n+1, n+1) arrays as in tridiag.cases.vorticity.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import Backend

from .vorticity import Boundary, Grid
from .vorticity_solver import VorticitySolver

ARRAYS = 56  # (n+1)²-node arrays of the field dtype at the peak of a run (fields, line systems, solver work)
HOST_ARRAYS = 10  # float64 (n+1)²-node arrays of its results on the host (fields, velocities, analysis)


def default_tol(dtype: str, n: int) -> float:
    """1e-6 in float64; in float32 max(1e-4, 1e-7 n²): the round-off floor of the residual grows
    like 1/h² (measured about 4e-5 on 32² cells)."""
    return 1e-6 if dtype == "float64" else max(1e-4, 1e-7 * n * n)


def default_dt(re: float, h: float) -> float:
    """Δt = CFL h (lid speed 1) with CFL = 12 / Pe clipped to [2, 8], Pe = Re h the cell Reynolds
    number: central convection needs small CFL numbers at large Pe. Measured with converging runs
    (CFL, Pe): Re 1000 (2, 15.6) (3, 7.8) (4, 3.9); Re 400 (4, 3.1) (6, 1.6); Re 100 (10, 0.4-1.6);
    (5, 15.6) did not converge."""
    return min(8.0, max(2.0, 12.0 / (re * h))) * h


def wall_relaxation(dt: float, re: float, h: float) -> float:
    """Default under-relaxation of the wall vorticity: min(1, 1 / D), D = Δt / (Re h²) the diffusion
    number. Measured: the explicit Thom coupling diverges once α D exceeds about 2 (α = 1 above D ≈ 2)."""
    return min(1.0, re * h * h / dt)


def cavity(
    backend: Backend,
    n: int,
    re: float,
    dt: float | None = None,
    solver: str = "thomas",
    psi_sweeps: int = 2,
    relaxation: float | None = None,
    dtype=np.float64,
    layout: str = "auto",
):
    """(VorticitySolver, ψ, ω) of the cavity on n × n cells, fields zero (fluid at rest); dt defaults
    to :func:`default_dt`, the wall-vorticity relaxation to :func:`wall_relaxation`."""
    grid = Grid.box(1.0, 1.0, n, n)
    fixed = np.ones(grid.shape, dtype=bool)
    fixed[1:-1, 1:-1] = False
    lid = np.zeros(grid.shape)
    lid[-1] = 1.0
    xp = backend.xp
    boundary = Boundary.create(xp, grid, fixed, wall_u=lid, dtype=dtype)
    step = default_dt(re, grid.hx) if dt is None else dt
    alpha = wall_relaxation(step, re, grid.hx) if relaxation is None else relaxation
    vs = VorticitySolver(
        backend,
        boundary,
        re,
        step,
        solver=solver,
        psi_sweeps=psi_sweeps,
        wall_relaxation=alpha,
        dtype=dtype,
        layout=layout,
    )
    return vs, xp.zeros(grid.shape, dtype=dtype), xp.zeros(grid.shape, dtype=dtype)
