"""Unsteady heat conduction ∂T/∂t = α ∇²T by Peaceman–Rachford ADI (Wei et al. 2013's case).

Grid: n × n nodes x_i = iΔx, y_j = jΔx (edges included) on the square [0, L]², L = (n-1)Δx;
the edges are held at 0 (Dirichlet). The paper does not state its initial field; ours is
the hot plate T₀ = sin(kπx/L) sin(lπy/L) (k = l = 1 by default), whose exact solution
decays as exp(-απ²(k² + l²) t / L²) (tridiag.cases.heat_exact), so every run is checked.
Paper defaults: Δx = 0.01, Δt = 0.01, α = 1 (r = αΔt/Δx² = 100), 100 steps.
"""
from __future__ import annotations

import time

import numpy as np

from .adi import ADI
from .heat_exact import decaying_mode
from ..kernels.adi_rhs import adi_pass_numpy
from ..kernels.thomas import thomas_numpy


def synchronize(xp) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def initial_field(xp, n: int, dtype, dx: float, k: int = 1, l: int = 1):
    x = np.arange(n) * dx
    return xp.asarray(decaying_mode(x, x[:, None], 0.0, (n - 1) * dx, k, l), dtype=dtype)


def relative_l2(t, reference) -> float:
    """Wei et al. 2013, eq. 10: ||t - reference||₂ / ||reference||₂ (host arrays, float64)."""
    t, reference = (np.asarray(v, np.float64) for v in (t, reference))
    return float(np.linalg.norm(t - reference) / np.linalg.norm(reference))


def run_unsteady(xp, n: int, steps: int, dtype, method: str = "auto", sweep: str = "strided", dx: float = 0.01,
                 dt: float = 0.01, alpha: float = 1.0, k: int = 1, l: int = 1, options: dict | None = None) -> dict:
    """``steps`` ADI steps from the hot plate; the host field and errors against the exact mode
    (continuous, and semi-discrete: the exact solution of the 5-point scheme in space)."""
    s = alpha * dt / (2 * dx * dx)
    adi = ADI(initial_field(xp, n, dtype, dx, k, l), method, sweep, options)
    synchronize(xp)
    t0 = time.perf_counter()
    for _ in range(steps):
        adi.step(s)
    synchronize(xp)
    seconds = time.perf_counter() - t0
    adi.check_finite(f"unsteady ADI (n={n}, {steps} steps)")
    host = adi.t.get() if hasattr(adi.t, "get") else np.array(adi.t)
    length, t_end = (n - 1) * dx, steps * dt
    x = np.arange(n) * dx
    exact = decaying_mode(x, x[:, None], t_end, length, k, l, alpha)
    semi = decaying_mode(x, x[:, None], t_end, length, k, l, alpha, dx=dx)
    return dict(n=n, steps=steps, dtype=np.dtype(dtype).name, method=method, solved_by=adi.solved_by, sweep=sweep,
                dx=dx, dt=dt, alpha=alpha, r=2 * s, length=length, t_end=t_end, mode=(k, l), seconds=seconds,
                ms_per_step=seconds / steps * 1e3 if steps else None,
                error_exact=relative_l2(host, exact), error_semi_discrete=relative_l2(host, semi),
                field=host, exact=exact)


def serial_cpu_run(t0: np.ndarray, steps: int, s: float) -> np.ndarray:
    """The serial CPU ADI (the speed-up baseline and the CPU result of eq. 10): NumPy, one
    core, Thomas (tridiag.kernels.thomas.thomas_numpy) vectorised over the lines, the delta
    form of tridiag.cases.adi; the x-lines are solved on a transposed copy (rows first), so no
    solve reads strided memory.
    """
    t = np.array(t0)
    off = np.zeros_like(t)
    diag = np.ones_like(t)
    off[1:-1, 1:-1] = -s
    diag[1:-1, 1:-1] = 1 + 2 * s
    d, dt = np.empty_like(t), np.empty_like(t)
    for _ in range(steps):
        adi_pass_numpy(t, d, 2 * s, True, False, False)
        adi_pass_numpy(d, dt, 0.0, False, False, True)
        adi_pass_numpy(thomas_numpy(off, diag, off, dt), d, 0.0, False, False, True)
        t += thomas_numpy(off, diag, off, d)
    return t
