"""The line sweeps of the vorticity–stream-function step, behind one interface:

- ``walls(psi, omega, alpha)``: Thom's wall vorticity, in place;
- ``transport(psi, omega)``: one Peaceman–Rachford step of the vorticity transport, ω in place;
- ``poisson(psi, omega, rho)``: one Peaceman–Rachford double sweep of ∇²ψ = −ω with parameter ρ,
  ψ in place (tridiag.cases.peaceman_rachford, the sweep the heat cases use too);
- ``dt``: the time step the transport uses.

:class:`FusedSweeps` does each half sweep in one launch (tridiag.kernels.line_sweeps: rows
built, solved and written by one block per line) and allocates nothing, so that a whole step can
be captured in a CUDA graph. :class:`LibrarySweeps` builds the rows with array expressions and
solves them by tridiag.solve with a chosen method: the NumPy reference of the fused kernels, and
on the GPU the path of the library methods (the paper's comparisons of PTA, CR and PCR).
Both take the transport coefficients from :func:`transport_coefficients`.

Rows at a free node (fixed nodes give identity rows keeping the field value), along a line of
spacing h with h_a across it and Δt/2 = half:
  transport: a = −diff − conv, c = conv − diff, b = 1 + 2 diff, diff = half/(Re h²), conv = s half/(2h)
             (s the velocity along the line), d = ω + diff_a δ_a²ω − (s_a half/(2h_a)) (ω₊ − ω₋).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import to_numpy

from ..kernels import line_sweeps as kernels
from .line_solver import FUSED, LineSolver, LineSystems, resolve_solver
from .peaceman_rachford import FusedADI, LibraryADI
from .vorticity import Boundary, wall_vorticity

INTERIOR = (slice(1, -1), slice(1, -1))


def transport_coefficients(grid, dt: float, re: float, along: str) -> dict:
    """Host floats of the transport half step implicit along ``along`` (module docstring)."""
    half = dt / 2
    h, h_a = (grid.hx, grid.hy) if along == "x" else (grid.hy, grid.hx)
    return {
        "two_hx": 2 * grid.hx,
        "two_hy": 2 * grid.hy,
        "diff": half / re / h**2,
        "conv_k": half / (2 * h),
        "diff_a": half / re / h_a**2,
        "conv_a": half / (2 * h_a),
    }


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
    """Rows by array expressions (NumPy or CuPy), solved by tridiag.solve with the method of the
    library ``solver`` (a LineSolver) in its layouts."""

    def __init__(self, xp, boundary: Boundary, re: float, dt: float, dtype, solver: LineSolver):
        super().__init__(xp, boundary, re)
        shape, g = self.grid.shape, self.grid
        self.omega_lines = {s: LineSystems.create(xp, shape, dtype, s, solver) for s in "xy"}
        self.adi = LibraryADI(xp, shape, dtype, solver, g.hx, g.hy, to_numpy(boundary.fixed))
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
        self.adi.sweep(psi, rho, omega)


class FusedSweeps(_Sweeps):
    """One launch per half sweep (tridiag.kernels.line_sweeps) on CuPy fields; one work
    field, nothing allocated per call."""

    def __init__(self, xp, boundary: Boundary, re: float, dt: float, dtype):
        kernels.check_fits(boundary.grid.shape, dtype)
        super().__init__(xp, boundary, re)
        g = self.grid
        self.star = xp.empty(g.shape, dtype)
        self.adi = FusedADI(xp, g.shape, dtype, g.hx, g.hy, to_numpy(boundary.fixed))
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
        self.adi.sweep(psi, rho, omega)


def make_sweeps(xp, boundary: Boundary, re: float, dt: float, dtype, solver: str, layout: str = "auto"):
    """The sweeps of line solver ``solver`` (tridiag.cases.line_solver.NAMES, with ``layout``;
    "auto" resolved for the array module ``xp`` and the grid)."""
    longest = max(boundary.grid.shape)
    choice = resolve_solver(solver, xp is not np, longest, longest <= kernels.longest_line(dtype), layout)
    if choice.fused:
        return FusedSweeps(xp, boundary, re, dt, dtype)
    return LibrarySweeps(xp, boundary, re, dt, dtype, choice)


def _copy_edges(dst, src) -> None:
    """The four box-edge rows/columns of ``src`` into ``dst`` (identity rows keep the field values)."""
    dst[0], dst[-1] = src[0], src[-1]
    dst[:, 0], dst[:, -1] = src[:, 0], src[:, -1]
