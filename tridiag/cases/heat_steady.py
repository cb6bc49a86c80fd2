"""Steady heat conduction in the unit square by the ADI iteration (Zolfaghari 2018).

Grid: n × n nodes including the edges, spacing h = 1/(n - 1); the edge y = 1 (row j = n-1,
corners included) is held at T1, the other edges at 0; the n-node lines are the
tridiagonal systems (edge rows are identity rows). The centre value is the node (n odd) or
the mean of the four nodes around (½, ½) (n even; exact to O(h⁴) for a harmonic field).
The discrete solution has T_centre = T1/4 exactly (the superposition argument holds for
the 5-point scheme too), so the centre error measures the unconverged iteration alone; the
centre line x = ½ against the series measures the discretisation.

Iteration k applies one Peaceman–Rachford step with parameter ρ_k (tridiag.cases.adi, s = 1/ρ):
  "paper":   ρ = 2, the paper's eqs. 3–4 (line relaxation, no acceleration);
  "optimal": the best single parameter, ρ = sqrt(λ_min λ_max) = 2 sin(πh), where
             λ = 4 sin²(mπh/2), m = 1 … n-2, are the eigenvalues of -δ² on a line;
  "cyclic":  geometric parameters ρ_j = λ_min (λ_max/λ_min)^((j - ½)/J), j = 1 … J, used in
             turn (a Wachspress-type cycle), J = ceil(log(λ_max/λ_min) / log(CYCLE_RATIO)).
Stopping rules, checked after every iteration:
  "paper":    Σ (Tᵏ - Tᵏ⁻¹)² < 1e-6 over all nodes (eq. 5, absolute, T in the units of T1);
  "residual": max|r| / (8 h²) <= tol T1, r = the 5-point residual in grid units; since
              the inverse 5-point Laplacian on the unit square has max-norm <= 1/8, this
              bounds the iteration error at every node by tol T1.
The line solves deliver the increment ΔT (tridiag.cases.adi's delta form), which vanishes at
convergence: an iterative line solver (checkerboard) with a relative tolerance on ΔT, even
a loose one such as 1e-4, leaves the converged field exact (it only perturbs the path).
"""
from __future__ import annotations

import math
import time

import numpy as np

from gpucfd.errors import ConvergenceError

from .adi import ADI

PARAMETERS = ("paper", "optimal", "cyclic")
STOPS = ("paper", "residual")
CYCLE_RATIO = 20.0  # λ_max/λ_min spanned by each parameter of the cycle
PAPER_TOL = 1e-6


def parameters(kind: str, n: int) -> list:
    """The cycle of coefficients s = 1/ρ for an n-node grid."""
    h = 1 / (n - 1)
    lam_min, lam_max = 4 * math.sin(math.pi * h / 2) ** 2, 4 * math.cos(math.pi * h / 2) ** 2
    if kind == "paper":
        return [0.5]
    if kind == "optimal":
        return [1 / math.sqrt(lam_min * lam_max)]
    count = max(1, math.ceil(math.log(lam_max / lam_min) / math.log(CYCLE_RATIO)))
    return [1 / (lam_min * (lam_max / lam_min) ** ((j + 0.5) / count)) for j in range(count)]


def initial_field(xp, n: int, dtype, t1: float):
    t = xp.zeros((n, n), dtype)
    t[-1] = t1
    return t


def centre(field: np.ndarray) -> float:
    """T at (½, ½): the middle node, or the mean of the four around it (host array)."""
    n = field.shape[0]
    m = n // 2
    return float(field[m, m] if n % 2 else field[m - 1:m + 1, m - 1:m + 1].mean())


def residual_bound(xp, t, h: float) -> float:
    """max|r| / (8 h²) over interior nodes (r: 5-point residual in grid units)."""
    r = t[:-2, 1:-1] + t[2:, 1:-1] + t[1:-1, :-2] + t[1:-1, 2:] - 4 * t[1:-1, 1:-1]
    return float(xp.abs(r).max()) / (8 * h * h)


def solve_steady(xp, n: int, dtype, method: str, sweep: str = "strided", params: str = "cyclic",
                 stop: str = "residual", tol: float = 1e-9, maxiter: int = 100000, t1: float = 100.0,
                 options: dict | None = None, progress=None) -> dict:
    """Iterate to the stopping rule; returns the host field and a summary.

    ConvergenceError (reason "iteration cap" or "diverged") if the rule is not met within
    ``maxiter`` iterations or a checkerboard line solve fails; its ``result`` attribute holds
    the summary so far.
    """
    h = 1 / (n - 1)
    cycle = parameters(params, n)
    adi = ADI(initial_field(xp, n, dtype, t1), method, sweep, options)
    change = bound = math.inf
    t0 = time.perf_counter()
    k = 0
    met = False
    failure = None
    while k < maxiter and not met:
        try:
            change = float((adi.step(cycle[k % len(cycle)]) ** 2).sum())
        except ConvergenceError as exc:  # a checkerboard line solve hit its cap or diverged
            failure = exc
            break
        k += 1
        bound = residual_bound(xp, adi.t, h)
        if not math.isfinite(change):
            break
        met = change < PAPER_TOL if stop == "paper" else bound <= tol * t1
        if progress and (met or k % 1000 == 0):
            progress(k, change, bound / t1)
    seconds = time.perf_counter() - t0
    host = adi.t.get() if hasattr(adi.t, "get") else np.array(adi.t)
    tc = centre(host)
    result = dict(n=n, h=h, dtype=np.dtype(dtype).name, method=method, solved_by=adi.solved_by, sweep=sweep,
                  parameters=params, rho=[1 / s for s in cycle], stop=stop, tol=tol if stop == "residual" else None,
                  iterations=k, inner_iterations=adi.inner_iterations if method == "checkerboard" else None,
                  seconds=seconds, converged=met, sum_change_squared=change, error_bound=bound,
                  t1=t1, t_centre=tc, centre_error=abs(tc - t1 / 4), options=dict(options or {}))
    result["field"] = host
    if not met:
        rule = "eq. 5 (sum of squared changes < 1e-6)" if stop == "paper" else f"the residual bound <= {tol:g} T1"
        message = f"the ADI iteration did not meet {rule} in {k} iterations"
        if failure is not None:
            reason, message = failure.reason, f"{message}: {failure}"
        else:
            reason = "diverged" if not math.isfinite(change) else "iteration cap"
            message += f" (last change {change:.3g}, error bound {bound:.3g})"
        err = ConvergenceError(message, reason)
        err.result = result
        raise err
    return result
