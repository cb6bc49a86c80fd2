"""The line sweeps of the vorticity–stream-function step, behind one interface:

- ``walls(psi, omega, alpha)``: Thom's wall vorticity, in place;
- ``transport(psi, omega)``: one Peaceman–Rachford step of the vorticity transport, ω in place;
- ``poisson(psi, omega, rho)``: one ADI double sweep of ∇²ψ = −ω with parameter ρ, ψ in place;
- ``dt``: the time step the transport uses.

:class:`FusedSweeps` does each half sweep in one launch (tridiag.kernels.vorticity_sweeps: rows
built, solved and written by one block per line) and allocates nothing, so that a whole step can
be captured in a CUDA graph. :class:`LibrarySweeps` builds the rows with array expressions and
solves them by tridiag.solve with a chosen method: the NumPy reference of the fused kernels, and
on the GPU the path of the library methods (the paper's comparisons of PTA, CR and PCR).
Both take their coefficients from :func:`transport_coefficients` and :func:`poisson_coefficients`.

Rows at a free node (fixed nodes give identity rows keeping the field value), along a line of
spacing h with h_a across it and Δt/2 = half:
  transport: a = −diff − conv, c = conv − diff, b = 1 + 2 diff, diff = half/(Re h²), conv = s half/(2h)
             (s the velocity along the line), d = ω + diff_a δ_a²ω − (s_a half/(2h_a)) (ω₊ − ω₋);
  Poisson:   a = c = −1/h², b = ρ + 2/h², d = ρψ + δ_a²ψ/h_a² + ω.
"""
from __future__ import annotations

import numpy as np

from ..kernels import vorticity_sweeps as kernels
from .line_solver import FUSED, LineSystems, resolve_solver
from .vorticity import Boundary, wall_vorticity

INTERIOR = (slice(1, -1), slice(1, -1))


def transport_coefficients(grid, dt: float, re: float, along: str) -> dict:
    """Host floats of the transport half step implicit along ``along`` (module docstring)."""
    half = dt / 2
    h, h_a = (grid.hx, grid.hy) if along == "x" else (grid.hy, grid.hx)
    return {"two_hx": 2 * grid.hx, "two_hy": 2 * grid.hy, "diff": half / re / h**2, "conv_k": half / (2 * h),
            "diff_a": half / re / h_a**2, "conv_a": half / (2 * h_a)}


def poisson_coefficients(grid, rho: float, along: str) -> dict:
    """Host floats of the Poisson half sweep implicit along ``along`` (module docstring)."""
    h, h_a = (grid.hx, grid.hy) if along == "x" else (grid.hy, grid.hx)
    return {"rho": rho, "off": -1 / h**2, "diag": rho + 2 / h**2, "inv_ha2": 1 / h_a**2}


class _Sweeps:
    """What both kinds of sweeps hold: the fields' array module, the boundary, Re and the time
    step, whose setter refreshes the transport coefficients (:meth:`_use_dt`)."""

    def __init__(self, xp, boundary: Boundary, re: float):
        self.xp, self.boundary, self.grid, self.re = xp, boundary, boundary.grid, re

    @property
    def dt(self) -> float:
        return self._dt

    @dt.setter
    def dt(self, value: float) -> None:
        self._dt = value
        self._use_dt(value)


class LibrarySweeps(_Sweeps):
    """Rows by array expressions (NumPy or CuPy), solved by tridiag.solve with the method of
    ``solver`` (a key of tridiag.cases.line_solver.SOLVERS) in that solver's layout."""

    def __init__(self, xp, boundary: Boundary, re: float, dt: float, dtype, solver: str):
        super().__init__(xp, boundary, re)
        shape = self.grid.shape
        self.omega_lines = {s: LineSystems.create(xp, shape, dtype, s, solver) for s in "xy"}
        self.psi_lines = {s: LineSystems.create(xp, shape, dtype, s, solver) for s in "xy"}
        free = boundary.free
        for s in "xy":
            lines = self.psi_lines[s]
            off = poisson_coefficients(self.grid, 0.0, s)["off"]
            lines.a[INTERIOR] = free * off
            lines.c[INTERIOR] = free * off
        self.methods = {s: lines.method for s, lines in self.omega_lines.items()}
        self.dt = dt

    def _use_dt(self, value: float) -> None:
        for s in "xy":
            diff = transport_coefficients(self.grid, value, self.re, s)["diff"]
            self.omega_lines[s].b[INTERIOR] = 1 + self.boundary.free * (2 * diff)

    def walls(self, psi, omega, alpha: float) -> None:
        wall_vorticity(psi, omega, self.boundary, alpha)

    def transport(self, psi, omega) -> None:
        star = self._transport_half(psi, omega, "x")
        omega[...] = self._transport_half(psi, star, "y")

    def _transport_half(self, psi, w, along: str):
        k = transport_coefficients(self.grid, self._dt, self.re, along)
        lines, free = self.omega_lines[along], self.boundary.free
        u = (psi[2:, 1:-1] - psi[:-2, 1:-1]) / k["two_hy"]
        v = (psi[1:-1, :-2] - psi[1:-1, 2:]) / k["two_hx"]
        speed, speed_a = (u, v) if along == "x" else (v, u)
        conv = speed * k["conv_k"]
        lines.a[INTERIOR] = free * (-k["diff"] - conv)
        lines.c[INTERIOR] = free * (conv - k["diff"])
        centre = w[INTERIOR]
        plus, minus = (w[2:, 1:-1], w[:-2, 1:-1]) if along == "x" else (w[1:-1, 2:], w[1:-1, :-2])
        explicit = k["diff_a"] * (plus - 2 * centre + minus) - (speed_a * k["conv_a"]) * (plus - minus)
        lines.d[INTERIOR] = centre + free * explicit
        _copy_edges(lines.d, w)
        return lines.solve()

    def poisson(self, psi, omega, rho: float) -> None:
        free, src, current = self.boundary.free, omega[INTERIOR], psi
        for along in "xy":
            k = poisson_coefficients(self.grid, rho, along)
            lines = self.psi_lines[along]
            lines.b[INTERIOR] = free * k["diag"] + (1 - free)
            c = current[INTERIOR]
            plus, minus = (current[2:, 1:-1], current[:-2, 1:-1]) if along == "x" else (current[1:-1, 2:], current[1:-1, :-2])
            lines.d[INTERIOR] = free * (rho * c + (plus - 2 * c + minus) * k["inv_ha2"] + src) + (1 - free) * c
            _copy_edges(lines.d, current)
            current = lines.solve()
        psi[...] = current


class FusedSweeps(_Sweeps):
    """One launch per half sweep (tridiag.kernels.vorticity_sweeps) on CuPy fields; one work
    field, nothing allocated per call."""

    def __init__(self, xp, boundary: Boundary, re: float, dt: float, dtype):
        kernels.check_fits(boundary.grid.shape, dtype)
        super().__init__(xp, boundary, re)
        self.star = xp.empty(self.grid.shape, dtype)
        self.methods = {"x": FUSED, "y": FUSED}
        self.dt = dt

    def _use_dt(self, value: float) -> None:
        self._transport = {s: transport_coefficients(self.grid, value, self.re, s) for s in "xy"}

    def walls(self, psi, omega, alpha: float) -> None:
        kernels.thom_cuda(psi, omega, self.boundary.thom, alpha)

    def transport(self, psi, omega) -> None:
        fixed = self.boundary.fixed
        kernels.transport_cuda(psi, omega, fixed, self.star, "x", self._transport["x"])
        kernels.transport_cuda(psi, self.star, fixed, omega, "y", self._transport["y"])

    def poisson(self, psi, omega, rho: float) -> None:
        fixed = self.boundary.fixed
        kernels.poisson_cuda(psi, omega, fixed, self.star, "x", poisson_coefficients(self.grid, rho, "x"))
        kernels.poisson_cuda(self.star, omega, fixed, psi, "y", poisson_coefficients(self.grid, rho, "y"))


def make_sweeps(xp, boundary: Boundary, re: float, dt: float, dtype, solver: str):
    """The sweeps of line solver ``solver`` (tridiag.cases.line_solver.NAMES; "auto" resolved for the
    array module ``xp`` and the grid)."""
    fits = max(boundary.grid.shape) <= kernels.longest_line(dtype)
    name = resolve_solver(solver, xp is not np, fits)
    if name == FUSED:
        return FusedSweeps(xp, boundary, re, dt, dtype)
    return LibrarySweeps(xp, boundary, re, dt, dtype, name)


def _copy_edges(dst, src) -> None:
    """The four box-edge rows/columns of ``src`` into ``dst`` (identity rows keep the field values)."""
    dst[0], dst[-1] = src[0], src[-1]
    dst[:, 0], dst[:, -1] = src[:, 0], src[:, -1]
