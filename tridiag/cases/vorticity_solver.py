"""Time stepping of the vorticity–stream-function equations with line-implicit solves.

One step (``VorticitySolver.step``), every sweep by the chosen line solver
(tridiag.cases.vorticity_sweeps: fused kernels, or rows by array expressions and tridiag.solve):

1. Thom wall vorticity from the current ψ (tridiag.cases.vorticity.wall_vorticity);
2. vorticity transport by Peaceman–Rachford ADI, u, v from ψ by central differences:
   (1 − Δt/2 Lx) ω* = (1 + Δt/2 Ly) ωⁿ,  (1 − Δt/2 Ly) ωⁿ⁺¹ = (1 + Δt/2 Lx) ω*,
   L_s = −u_s δ_s + δ_ss / Re (δ_s, δ_ss: central first and second differences);
3. ``psi_sweeps`` Peaceman–Rachford ADI sweeps of ∇²ψ = −ω warm-started from the
   current ψ: (ρ − δxx) ψ* = (ρ + δyy) ψ + ω, (ρ − δyy) ψ⁺ = (ρ + δxx) ψ* + ω, the
   pseudo-time parameter ρ cycling through a geometric sequence spanning the spectrum of
   −δxx, −δyy (:func:`poisson_parameters`).

A fixed point of the step satisfies the steady discrete equations exactly (for any Δt),
so the same step serves steady problems (pseudo-time) and unsteady ones (Δt physical).
Fixed nodes give identity rows and keep their field values.
"""

from __future__ import annotations

import math

import numpy as np

from gpucfd.backend import Backend
from gpucfd.errors import ConvergenceError, check_range
from gpucfd.graphs import StepGraphs

from .peaceman_rachford import parameters, spectrum
from .vorticity import Boundary, interior_velocity, steady_residuals
from .vorticity_sweeps import FusedSweeps, make_sweeps

BLOWUP = 1e8  # fields count as diverged once max|ω| exceeds BLOWUP / min(hx, hy): with unit speeds a flow's ω is O(1/h)


class VorticitySolver:
    """Steps (ψ, ω) on ``boundary``'s grid at Reynolds number ``re`` with time step ``dt``.

    solver, layout: a name of tridiag.cases.line_solver.NAMES and LAYOUT_NAMES (the sweeps:
    tridiag.cases.vorticity_sweeps);
    psi_sweeps: ADI sweeps of the ψ Poisson equation per step; poisson_cycle: length of the ρ
    cycle; wall_relaxation: α in (0, 1], wall ω ← α ω_Thom + (1 − α) ω_previous (1 for time
    accuracy; below 1 lets steady runs take larger Δt, the fixed point is the same); dtype: of
    the fields. Fields are (ny, nx) arrays of ``backend`` updated in place by :meth:`step`;
    :meth:`advance` does many steps (on the GPU with fused sweeps, replayed as CUDA graphs).
    """

    def __init__(
        self,
        backend: Backend,
        boundary: Boundary,
        re: float,
        dt: float,
        solver: str = "thomas",
        psi_sweeps: int = 1,
        poisson_cycle: int = 8,
        wall_relaxation: float = 1.0,
        dtype=np.float64,
        layout: str = "auto",
    ):
        xp = backend.xp
        self.backend, self.xp, self.boundary, self.grid = backend, xp, boundary, boundary.grid
        self.re = float(check_range("re", re, 0, low_open=True))
        self.psi_sweeps = int(check_range("psi_sweeps", psi_sweeps, 1, integer=True))
        self.wall_relaxation = float(check_range("wall_relaxation", wall_relaxation, 0, 1, low_open=True))
        self.dtype = np.dtype(dtype)
        self.solver, self.layout = solver, layout
        self.rho = parameters(
            *spectrum(self.grid.shape, self.grid.hx, self.grid.hy),
            int(check_range("poisson_cycle", poisson_cycle, 1, integer=True)),
        )
        self.sweeps = 0  # ψ sweeps done so far (position in the ρ cycle)
        self.lines = make_sweeps(
            xp, boundary, self.re, float(check_range("dt", dt, 0, low_open=True)), self.dtype, solver, layout
        )
        self.graphs = StepGraphs(xp) if isinstance(self.lines, FusedSweeps) else None

    @property
    def methods(self) -> dict:
        """The method solving the x- and y-lines ("fused" or a tridiag.solve method)."""
        return self.lines.methods

    @property
    def dt(self) -> float:
        return self.lines.dt

    @dt.setter
    def dt(self, value: float) -> None:
        self.lines.dt = float(check_range("dt", value, 0, low_open=True))

    def step(self, psi, omega) -> None:
        """One time step of (ψ, ω), in place."""
        self.lines.walls(psi, omega, self.wall_relaxation)
        self.transport(psi, omega)
        for _ in range(self.psi_sweeps):
            self.poisson_sweep(psi, omega)

    def transport(self, psi, omega) -> None:
        """One Peaceman–Rachford step of the vorticity transport (velocity from ψ), ω in place;
        fixed nodes keep their ω."""
        self.lines.transport(psi, omega)

    def poisson_sweep(self, psi, omega) -> None:
        """One ADI double sweep of ∇²ψ = −ω (x-lines, then y-lines), ψ in place; advances the ρ cycle."""
        rho = self.rho[self.sweeps % len(self.rho)]
        self.sweeps += 1
        self.lines.poisson(psi, omega, rho)

    def replays(self, count: int) -> bool:
        """Whether :meth:`advance` of ``count`` steps from here replays a captured graph (or needs none)."""
        return self.graphs is None or (self.sweeps % len(self.rho), count) in self.graphs.graphs

    def launches_per_step(self, count: int) -> float | None:
        """Operations per step in the graph :meth:`advance` of ``count`` steps replays from here;
        None without graphs or before that graph is captured."""
        key = (self.sweeps % len(self.rho), count)
        if self.graphs is None or key not in self.graphs.graphs:
            return None
        return self.graphs.operations(key) / count

    def advance(self, count: int, step) -> None:
        """``count`` calls of ``step()`` (one time step each, device work only): on the GPU with
        fused sweeps replayed from a CUDA graph captured once per (position in the ρ cycle, count)."""
        if self.graphs is None:
            for _ in range(count):
                step()
            return
        key = (self.sweeps % len(self.rho), count)
        sweeps = self.sweeps
        self.graphs.run(key, count, step)
        self.sweeps = sweeps + count * self.psi_sweeps

    def march(
        self,
        psi,
        omega,
        steps: int,
        tol: float | None = None,
        check_every: int = 50,
        progress=None,
        step=None,
        monitor=None,
    ) -> dict:
        """Up to ``steps`` steps of (ψ, ω) in place, checking residuals and divergence every
        ``check_every`` steps (and after the last); with ``tol``, stop once the residual is
        <= tol. ``step()`` does one step (default ``self.step(psi, omega)``; cases that also
        update boundary values pass their own); ``monitor()``, called before the first step and
        after each check, returns the stability numbers quoted should the next steps blow up
        (default ``self.stability(psi)``) and may raise to stop the run. ``progress(steps,
        residuals, stability)`` is called at each check. Returns {"steps", "converged"
        (residual <= tol; False without tol), "residual", "history": [[step, residual], ...]};
        ConvergenceError("diverged") if the fields blow up."""
        step = step or (lambda: self.step(psi, omega))
        monitor = monitor or (lambda: self.stability(psi))
        history, res, stable, done = [], {"residual": math.nan}, monitor(), 0
        while done < steps:
            chunk = min(check_every, steps - done)
            with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is reported by check()
                self.advance(chunk, step)
            done += chunk
            res = self.check(psi, omega, done, stable)
            stable = monitor()
            history.append([done, res["residual"]])
            if progress is not None:
                progress(done, res, stable)
            if tol is not None and res["residual"] <= tol:
                break
        converged = tol is not None and res["residual"] <= tol
        return {"steps": done, "converged": converged, "residual": res["residual"], "history": history}

    def residuals(self, psi, omega) -> dict:
        """Steady residuals (host floats): psi = max|∇²ψ + ω|, omega = max|steady transport residual|,
        both relative to max|ω| over the free nodes; residual = the larger; vorticity = max|ω| there."""
        r_psi, r_omega, vorticity = (float(r) for r in steady_residuals(psi, omega, self.re, self.boundary))
        scale = vorticity if vorticity > 0 else 1.0
        out = {"psi": r_psi / scale, "omega": r_omega / scale}
        out["residual"] = max(out.values())
        out["vorticity"] = vorticity
        return out

    def stability(self, psi) -> dict:
        """Host floats: the convective CFL number max(|u| Δt/hx + |v| Δt/hy), the cell Reynolds
        number Re max(|u| hx, |v| hy), the wall coupling number α Δt / (Re min(hx, hy)²) and the
        largest Δt keeping CFL <= 2 and the coupling number <= 2 (the limits measured stable)."""
        g, b, xp = self.grid, self.boundary, self.xp
        u, v = interior_velocity(psi, g)
        walls = [
            float(xp.abs(w).max()) if w.size else 0.0 for w in (b.wall_u, b.wall_v)
        ]  # a moving lid counts from the start
        rate = max(float((xp.abs(u) / g.hx + xp.abs(v) / g.hy).max()), walls[0] / g.hx + walls[1] / g.hy)
        cell_re = self.re * max(float(xp.abs(u).max()), walls[0]) * g.hx
        cell_re = max(cell_re, self.re * max(float(xp.abs(v).max()), walls[1]) * g.hy)
        coupling = self.wall_relaxation / (self.re * min(g.hx, g.hy) ** 2)
        return {
            "cfl": rate * self.dt,
            "cell_re": cell_re,
            "coupling": coupling * self.dt,
            "dt_limit": min(2 / rate if rate > 0 else math.inf, 2 / coupling),
        }

    def check(self, psi, omega, iteration: int, last_stable: dict | None = None) -> dict:
        """Residuals at ``iteration``; ConvergenceError("diverged") naming Δt and the limits if the
        fields are no longer finite or max|ω| exceeds BLOWUP / min(hx, hy). ``last_stable``:
        stability() of an earlier, finite state (quoted when the current velocities are NaN)."""
        res = self.residuals(psi, omega)
        if math.isfinite(res["residual"]) and res["vorticity"] <= BLOWUP / min(self.grid.hx, self.grid.hy):
            return res
        info = last_stable or {}
        raise ConvergenceError(
            f"diverged at step {iteration} (ψ, ω no longer finite or max|ω| > {BLOWUP:g}/h) with time step "
            f"Δt = {self.dt:g}: convective CFL "
            f"number max(|u|Δt/hx + |v|Δt/hy) = {info.get('cfl', math.nan):.3g} at cell Reynolds number "
            f"{info.get('cell_re', math.nan):.3g}, wall coupling αΔt/(Re h²) = {info.get('coupling', math.nan):.3g} "
            f"(α = wall relaxation {self.wall_relaxation:g}) before it blew up; stable runs keep the CFL number <= 2 "
            f"at cell Reynolds numbers above 2 and the coupling <= 2: use Δt <= {info.get('dt_limit', math.nan):.3g}",
            "diverged",
        )
