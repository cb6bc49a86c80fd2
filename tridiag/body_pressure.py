"""The cylinder's stream-function value from single-valued pressure (the channel is multiply connected).

ψ is constant on the cylinder, but the constant b (the flux between the cylinder and the lower
wall) is not known in advance: fixing b = ψ_in(y_c) forces equal fluxes above and below at every
instant. The exact condition is that the pressure returns to its value around the body,
∮ ∂p/∂s ds = (1/Re) ∮ ∂ω/∂n ds = 0 on the no-slip surface. Since ψ enters the wall vorticity
linearly (Thom's formula), we write ψ = ψ₀ + c ψ₁ with ψ₁ the discrete harmonic field (1 on
the cylinder, 0 on the channel walls and the inflow, ∂ψ₁/∂x = 0 at the outflow, ∇²ψ₁ = 0 at
the free nodes): adding c ψ₁ changes neither ∇²ψ at the free nodes nor ω there, only the
body value and the Thom vorticity on the faces, so c follows from one linear equation after
every step. Cost per step: a copy of ω, the Thom formula, the surface integral and one axpy.
"""
from __future__ import annotations

import numpy as np

from gpucfd.errors import ConvergenceError

from .channel import apply_outflow, normal_vorticity_flux
from .vorticity import wall_vorticity
from .vorticity_solver import VorticitySolver

RELAX = 0.25  # fraction of the correction c applied per step (see PressureBodyValue.correct)
TOL = 1e-11  # largest change of ψ₁ over one ρ cycle of ADI sweeps that counts as converged
MAX_SWEEPS = 20000


class PressureBodyValue:
    """Corrects ψ after each step of ``flow`` (a CylinderFlow) so that ∮ ∂ω/∂n ds = 0 on the cylinder.

    psi1: ψ₁ computed before for the same channel (any backend), else solved here by the core's
    ADI sweeps (some hundreds; ``sweeps`` says how many), in float64 whatever the flow's dtype
    (float32 sweeps stall at a round-off floor of 1e-6 to 1e-5 over a cycle, solver-dependent)."""

    def __init__(self, flow, psi1=None):
        xp, core = flow.xp, flow.core
        self.channel, self.boundary = flow.channel, flow.boundary
        self.scratch = xp.empty_like(flow.psi)
        if psi1 is None:
            if core.dtype != np.float64:
                core = VorticitySolver(xp, self.channel.boundary(xp), core.re, core.dt, solver=core.solver)
            psi1, self.sweeps = self._solve(core, flow.grid)
        else:
            self.sweeps = 0
        self.psi1 = xp.asarray(psi1.get() if hasattr(psi1, "get") else psi1, dtype=flow.psi.dtype)
        self.sensitivity = self._sensitivity()

    def _solve(self, core, grid) -> tuple:
        """(ψ₁ in the core's dtype, sweeps taken) by the core's ADI sweeps; ConvergenceError at MAX_SWEEPS."""
        xp = core.xp
        j0, j1, i0, i1 = self.channel.body
        psi1 = xp.zeros(grid.shape, dtype=core.dtype)
        psi1[j0:j1 + 1, i0:i1 + 1] = 1
        zero = xp.zeros_like(psi1)
        cycle = len(core.rho)
        for done in range(0, MAX_SWEEPS, cycle):
            before = psi1.copy()
            for _ in range(cycle):
                core.poisson_sweep(psi1, zero)
                apply_outflow(psi1, zero, grid, 1.0)
            if float(xp.abs(psi1 - before).max()) < TOL:
                return psi1, done + cycle
        raise ConvergenceError(f"the harmonic body field psi_1 did not converge in {MAX_SWEEPS} ADI sweeps", "psi_1")

    def _sensitivity(self) -> float:
        """d(∮ ∂ω/∂n ds)/dc: the surface integral of the Thom vorticity of ψ₁ alone."""
        self.scratch[...] = 0
        wall_vorticity(self.psi1, self.scratch, self.boundary)
        return float(normal_vorticity_flux(self.scratch, self.channel))

    def correct(self, psi, omega) -> None:
        """ψ ← ψ + RELAX · c ψ₁, c making ∮ ∂ω/∂n ds = 0 for the Thom vorticity of ψ + c ψ₁ (in place).

        Applying the whole c each step passes the Poisson iteration's error near the body into
        the body value: with 2 ψ sweeps per step and the 8-long ρ cycle, a 4-step sawtooth of
        about 1 % of Q (40x250, Re 100). RELAX = 1/4 filters it (a lag of about 4 steps, against
        shedding periods of 70 steps and more at the default Δt); a steady state is unchanged."""
        self.scratch[...] = omega
        wall_vorticity(psi, self.scratch, self.boundary)
        psi += (-RELAX * normal_vorticity_flux(self.scratch, self.channel) / self.sensitivity) * self.psi1

