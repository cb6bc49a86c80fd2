"""Unsteady heat conduction ∂T/∂t = α ∇²T by Peaceman–Rachford ADI (Wei et al. 2013's case).

Grid: n × n nodes x_i = iΔx, y_j = jΔx (edges included) on the square [0, L]², L = (n-1)Δx;
the edges are held at 0 (Dirichlet). The paper does not state its initial field; ours is
the hot plate T₀ = sin(kx πx/L) sin(ky πy/L) (kx = ky = 1 by default), whose exact solution
decays as exp(-απ²(kx² + ky²) t / L²) (tridiag.cases.heat_exact), so every run is checked.
Paper defaults: Δx = 0.01, Δt = 0.01, α = 1 (r = αΔt/Δx² = 100), 100 steps.
"""

from __future__ import annotations

import time

import numpy as np

from gpucfd.backend import Backend
from gpucfd.errors import ConvergenceError
from gpucfd.graphs import StepGraphs

from .heat_exact import decaying_mode
from .peaceman_rachford import make_adi

GRAPH_BLOCK = 50  # time steps per CUDA graph


def initial_field(xp, n: int, dtype, dx: float, kx: int = 1, ky: int = 1):
    x = np.arange(n) * dx
    return xp.asarray(decaying_mode(x, x[:, None], 0.0, (n - 1) * dx, kx, ky), dtype=dtype)


def relative_l2(t, reference) -> float:
    """Wei et al. 2013, eq. 10: ||t - reference||₂ / ||reference||₂ (host arrays, float64)."""
    t, reference = (np.asarray(v, np.float64) for v in (t, reference))
    return float(np.linalg.norm(t - reference) / np.linalg.norm(reference))


def march(backend: Backend, adi, t, steps: int, rho: float) -> None:
    """``steps`` Crank–Nicolson ADI steps of ``t`` in place (ρ = 2/(αΔt)); on the GPU in blocks
    of GRAPH_BLOCK steps replayed from CUDA graphs (but the checkerboard solver, which reads its
    iteration counts back)."""
    graphs = None if adi.iterative else StepGraphs(backend.xp)
    done = 0
    while done < steps:
        count = min(GRAPH_BLOCK, steps - done)
        if graphs is None:
            for _ in range(count):
                adi.sweep(t, rho)
        else:
            graphs.run(count, count, lambda: adi.sweep(t, rho))
        done += count


def run_unsteady(
    backend: Backend,
    n: int,
    steps: int,
    dtype,
    solver: str = "auto",
    layout: str = "auto",
    dx: float = 0.01,
    dt: float = 0.01,
    alpha: float = 1.0,
    kx: int = 1,
    ky: int = 1,
    options: dict | None = None,
) -> dict:
    """``steps`` ADI steps from the hot plate with line solver ``solver`` (tridiag.cases.line_solver
    names, ``layout``); the host field and errors against the exact mode (continuous, and
    semi-discrete: the exact solution of the 5-point scheme in space)."""
    xp = backend.xp
    adi = make_adi(xp, (n, n), dtype, solver, dx, dx, layout=layout, options=options, iterative=True)
    t = initial_field(xp, n, dtype, dx, kx, ky)
    rho = 2 / (alpha * dt)
    backend.synchronize()
    t0 = time.perf_counter()
    march(backend, adi, t, steps, rho)
    backend.synchronize()
    seconds = time.perf_counter() - t0
    host = backend.to_numpy(t)
    if not np.isfinite(host).all():
        raise ConvergenceError(
            f"unsteady ADI (n={n}, {steps} steps): the field holds inf/NaN after {adi.describe()} "
            "solves (overflow or a broken-down solve)",
            "diverged",
        )
    length, t_end = (n - 1) * dx, steps * dt
    x = np.arange(n) * dx
    exact = decaying_mode(x, x[:, None], t_end, length, kx, ky, alpha)
    semi = decaying_mode(x, x[:, None], t_end, length, kx, ky, alpha, dx=dx)
    return dict(
        n=n,
        steps=steps,
        dtype=np.dtype(dtype).name,
        solver=solver,
        solved_by=adi.describe(),
        dx=dx,
        dt=dt,
        alpha=alpha,
        r=alpha * dt / dx**2,
        length=length,
        t_end=t_end,
        mode=(kx, ky),
        seconds=seconds,
        ms_per_step=seconds / steps * 1e3 if steps else None,
        error_exact=relative_l2(host, exact),
        error_semi_discrete=relative_l2(host, semi),
        field=host,
        exact=exact,
    )


def serial_cpu_run(t0: np.ndarray, steps: int, r: float) -> np.ndarray:
    """The serial CPU ADI (the speed-up baseline and the CPU result of eq. 10): the same sweep
    on NumPy, one core, Thomas vectorised over the lines in the interleaved layout (row k of
    all lines adjacent: the x-lines on a transposed copy), r = αΔt/Δx²."""
    t = np.array(t0)
    adi = make_adi(np, t.shape, t.dtype, "thomas", layout="interleaved")
    for _ in range(steps):
        adi.sweep(t, 2 / r)
    return t
