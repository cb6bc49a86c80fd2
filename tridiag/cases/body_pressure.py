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

from gpucfd.backend import to_numpy
from gpucfd.errors import ConvergenceError

from ..kernels.channel_flow import for_module
from .channel import CONVECTIVE_SPEED
from .vorticity import distinct_nodes
from .vorticity_solver import VorticitySolver

RELAX = 0.25  # fraction of the correction c applied per step (see PressureBodyValue.correct)
TOL = 1e-11  # largest change of ψ₁ over one ρ cycle of ADI sweeps that counts as converged
MAX_SWEEPS = 20000


def face_samples(channel, walls: list) -> dict:
    """Host arrays of the cylinder's face samples for tridiag.kernels.channel_flow.body_gain: per
    face node (corners once per face) q, the row of its ThomTable (built from ``walls``), first
    and second, the flat fluid nodes one and two spacings along the outward normal, and weight,
    ds · (trapezoid weight) / (2 dn), so that Σ weight (−3 ω_w + 4 ω₁ − ω₂) = ∮ ∂ω/∂n ds with
    second-order one-sided differences (tridiag.cases.channel.normal_vorticity_flux)."""
    g = channel.grid
    nx = g.nx
    j0, j1, i0, i1 = channel.body
    rows, cols = np.arange(j0, j1 + 1), np.arange(i0, i1 + 1)
    faces = [  # (j, i of the face nodes, normal step (dj, di), spacing along the face, normal spacing)
        (rows, np.full(rows.size, i0), (0, -1), g.hy, g.hx),
        (rows, np.full(rows.size, i1), (0, 1), g.hy, g.hx),
        (np.full(cols.size, j0), cols, (-1, 0), g.hx, g.hy),
        (np.full(cols.size, j1), cols, (1, 0), g.hx, g.hy),
    ]
    nodes = distinct_nodes(walls)
    q, first, second, weight = [], [], [], []
    for j, i, (dj, di), ds, dn in faces:
        flat = j * nx + i
        trapezoid = np.ones(flat.size)
        trapezoid[[0, -1]] = 0.5
        q.append(np.searchsorted(nodes, flat))
        first.append(flat + dj * nx + di)
        second.append(flat + 2 * (dj * nx + di))
        weight.append(ds * trapezoid / (2 * dn))
    return {
        "q": np.concatenate(q).astype(np.int32),
        "first": np.concatenate(first),
        "second": np.concatenate(second),
        "weight": np.concatenate(weight),
    }


class PressureBodyValue:
    """Corrects ψ after each step of ``flow`` (a CylinderFlow) so that ∮ ∂ω/∂n ds = 0 on the cylinder.

    psi1: ψ₁ computed before for the same channel (host or device array), else solved here by the
    core's ADI sweeps (some hundreds; ``sweeps`` says how many), in float64 whatever the flow's dtype
    (float32 sweeps stall at a round-off floor of 1e-6 to 1e-5 over a cycle, solver-dependent).
    The correction launches two kernels and reads nothing back (tridiag.kernels.channel_flow)."""

    def __init__(self, flow, psi1=None):
        xp, core = flow.xp, flow.core
        self.xp, self.channel, self.boundary = xp, flow.channel, flow.boundary
        self.kernels = for_module(xp)
        faces = face_samples(self.channel, self.boundary.walls)
        self.faces = {k: xp.asarray(v, dtype=flow.psi.dtype if k == "weight" else v.dtype) for k, v in faces.items()}
        self.gain = xp.zeros(1, dtype=flow.psi.dtype)
        if psi1 is None:
            if core.dtype != np.float64:
                core = VorticitySolver(
                    flow.backend, self.channel.boundary(xp), core.re, core.dt, solver=core.solver, layout=core.layout
                )
            psi1, self.sweeps = self._solve(core, flow.grid)
        else:
            self.sweeps = 0
        self.psi1 = xp.asarray(to_numpy(psi1) if xp is np else psi1, dtype=flow.psi.dtype)
        self.sensitivity = self._sensitivity()

    def _solve(self, core, grid) -> tuple:
        """(ψ₁ in the core's dtype, sweeps taken) by the core's ADI sweeps; ConvergenceError at MAX_SWEEPS."""
        xp = core.xp
        j0, j1, i0, i1 = self.channel.body
        psi1 = xp.zeros(grid.shape, dtype=core.dtype)
        psi1[j0 : j1 + 1, i0 : i1 + 1] = 1
        zero = xp.zeros_like(psi1)
        cycle = len(core.rho)
        outflow = self.kernels["outflow"]
        for done in range(0, MAX_SWEEPS, cycle):
            before = psi1.copy()
            for _ in range(cycle):
                core.poisson_sweep(psi1, zero)
                outflow(psi1, zero, CONVECTIVE_SPEED / grid.hx)
            if float(xp.abs(psi1 - before).max()) < TOL:
                return psi1, done + cycle
        raise ConvergenceError(f"the harmonic body field psi_1 did not converge in {MAX_SWEEPS} ADI sweeps", "psi_1")

    def _sensitivity(self) -> float:
        """d(∮ ∂ω/∂n ds)/dc: the surface integral of the Thom vorticity of ψ₁ alone."""
        self.kernels["body_gain"](
            self.psi1, self.xp.zeros_like(self.psi1), self.boundary.thom, self.faces, 1.0, self.gain
        )
        return float(self.gain[0])

    def correct(self, psi, omega) -> None:
        """ψ ← ψ + RELAX · c ψ₁, c making ∮ ∂ω/∂n ds = 0 for the Thom vorticity of ψ + c ψ₁ (in place).

        Applying the whole c each step passes the Poisson iteration's error near the body into
        the body value: with 2 ψ sweeps per step and the 8-long ρ cycle, a 4-step sawtooth of
        about 1 % of Q (40x250, Re 100). RELAX = 1/4 filters it (a lag of about 4 steps, against
        shedding periods of 70 steps and more at the default Δt); a steady state is unchanged."""
        self.kernels["body_gain"](psi, omega, self.boundary.thom, self.faces, -RELAX / self.sensitivity, self.gain)
        self.kernels["add_scaled"](psi, self.psi1, self.gain)
