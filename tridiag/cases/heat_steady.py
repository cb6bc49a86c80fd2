"""Steady heat conduction in the unit square by the ADI iteration (Zolfaghari 2018).

Grid: n × n nodes including the edges, spacing h = 1/(n - 1); the edge y = 1 (row j = n-1,
corners included) is held at T1, the other edges at 0; the n-node lines are the
tridiagonal systems (edge rows are identity rows). The centre value is the node (n odd) or
the mean of the four nodes around (½, ½) (n even; exact to O(h⁴) for a harmonic field).
The discrete solution has T_centre = T1/4 exactly (the superposition argument holds for
the 5-point scheme too), so the centre error measures the unconverged iteration alone; the
centre line x = ½ against the series measures the discretisation.

Iteration k applies one Peaceman–Rachford double sweep with parameter ρ_k
(tridiag.cases.peaceman_rachford; ρ in 1/length², λ below in grid units, ρ h² = λ):
  "paper":   ρ h² = 2, the paper's eqs. 3–4 (line relaxation, no acceleration);
  "optimal": the best single parameter, ρ = sqrt(λ_min λ_max), λ_min, λ_max the extreme
             eigenvalues of −δ²/h² on a line (peaceman_rachford.spectrum);
  "cyclic":  geometric parameters from λ_max down to λ_min (peaceman_rachford.parameters),
             J = ceil(log(λ_max/λ_min) / log(CYCLE_RATIO)) of them, used in turn (a
             Wachspress-type cycle).
Stopping rules, checked every ``check_every`` iterations (a host read; between checks the
iterations run on the device without one):
  "paper":    Σ (Tᵏ - Tᵏ⁻¹)² < 1e-6 over all nodes (eq. 5, absolute, T in the units of T1);
  "residual": max|r| / (8 h²) <= tol T1, r = the 5-point residual in grid units; since
              the inverse 5-point Laplacian on the unit square has max-norm <= 1/8, this
              bounds the iteration error at every node by tol T1.
The line solves deliver the increment ΔT (the delta form of tridiag.cases.peaceman_rachford), which vanishes at
convergence: an iterative line solver (checkerboard) with a relative tolerance on ΔT, even
a loose one such as 1e-4, leaves the converged field exact (it only perturbs the path).
"""

from __future__ import annotations

import math
import time

import numpy as np

from gpucfd.backend import Backend
from gpucfd.errors import ConvergenceError

from .peaceman_rachford import make_adi, parameters as adi_parameters, spectrum

PARAMETERS = ("paper", "optimal", "cyclic")
STOPS = ("paper", "residual")
CYCLE_RATIO = 20.0  # λ_max/λ_min spanned by each parameter of the cycle
PAPER_TOL = 1e-6


def parameters(kind: str, n: int) -> list:
    """The cycle of ADI parameters ρ (1/length²) of rule ``kind`` for the n-node unit square."""
    h = 1 / (n - 1)
    if kind == "paper":
        return [2 / h**2]
    low, high = spectrum((n, n), h, h)
    count = 1 if kind == "optimal" else max(1, math.ceil(math.log(high / low) / math.log(CYCLE_RATIO)))
    return adi_parameters(low, high, count)


def initial_field(xp, n: int, dtype, t1: float):
    t = xp.zeros((n, n), dtype)
    t[-1] = t1
    return t


def centre(field: np.ndarray) -> float:
    """T at (½, ½): the middle node, or the mean of the four around it (host array)."""
    n = field.shape[0]
    m = n // 2
    return float(field[m, m] if n % 2 else field[m - 1 : m + 1, m - 1 : m + 1].mean())


def residual_bound(xp, t, h: float) -> float:
    """max|r| / (8 h²) over interior nodes (r: 5-point residual in grid units)."""
    r = t[:-2, 1:-1] + t[2:, 1:-1] + t[1:-1, :-2] + t[1:-1, 2:] - 4 * t[1:-1, 1:-1]
    return float(xp.abs(r).max()) / (8 * h * h)


def solve_steady(
    backend: Backend,
    n: int,
    dtype,
    solver: str = "auto",
    layout: str = "auto",
    params: str = "cyclic",
    stop: str = "residual",
    tol: float = 1e-9,
    maxiter: int = 100000,
    t1: float = 100.0,
    options: dict | None = None,
    progress=None,
    check_every: int = 10,
) -> dict:
    """Iterate to the stopping rule, tested every ``check_every`` iterations, with line solver
    ``solver`` (tridiag.cases.line_solver names, ``layout``); returns the host field and a summary.

    ConvergenceError (reason "iteration cap" or "diverged") if the rule is not met within
    ``maxiter`` iterations or a checkerboard line solve fails; its ``result`` attribute holds
    the summary so far.
    """
    xp = backend.xp
    h = 1 / (n - 1)
    cycle = parameters(params, n)
    adi = make_adi(xp, (n, n), dtype, solver, h, h, layout=layout, options=options, keep_delta=True, iterative=True)
    t = initial_field(xp, n, dtype, t1)
    change = bound = math.inf
    t0 = time.perf_counter()
    k = 0
    met = False
    failure = None
    while k < maxiter and not met:
        try:
            for _ in range(min(check_every, maxiter - k)):
                delta = adi.sweep(t, cycle[k % len(cycle)])
                k += 1
        except ConvergenceError as exc:  # a checkerboard line solve hit its cap or diverged
            failure = exc
            break
        change = float((delta**2).sum())
        bound = residual_bound(xp, t, h)
        if not (math.isfinite(bound) and math.isfinite(change)):
            break
        met = change < PAPER_TOL if stop == "paper" else bound <= tol * t1
        if progress and (met or k % 1000 < check_every):
            progress(k, change, bound / t1)
    seconds = time.perf_counter() - t0
    host = backend.to_numpy(t)
    tc = centre(host)
    result = dict(
        n=n,
        h=h,
        dtype=np.dtype(dtype).name,
        solver=solver,
        solved_by=adi.describe(),
        parameters=params,
        rho_h2=[rho * h * h for rho in cycle],
        stop=stop,
        tol=tol if stop == "residual" else None,
        check_every=check_every,
        iterations=k,
        inner_iterations=adi.inner_iterations,
        seconds=seconds,
        converged=met,
        sum_change_squared=change,
        error_bound=bound,
        t1=t1,
        t_centre=tc,
        centre_error=abs(tc - t1 / 4),
        options=dict(options or {}),
    )
    result["field"] = host
    if not met:
        rule = "eq. 5 (sum of squared changes < 1e-6)" if stop == "paper" else f"the residual bound <= {tol:g} T1"
        message = f"the ADI iteration did not meet {rule} in {k} iterations"
        if failure is not None:
            reason, message = failure.reason, f"{message}: {failure}"
        else:
            reason = "diverged" if not (math.isfinite(bound) and math.isfinite(change)) else "iteration cap"
            message += f" (last change {change:.3g}, error bound {bound:.3g})"
        err = ConvergenceError(message, reason)
        err.result = result
        raise err
    return result
