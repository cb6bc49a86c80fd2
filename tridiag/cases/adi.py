"""Peaceman–Rachford ADI on a square field of n × n nodes with fixed edge values, written
once for NumPy and CuPy (the array module of the field).

A step with coefficient s solves, with δx², δy² the second differences in grid units,

    (1 − s δx²) T* = (1 + s δy²) Tᵏ,   (1 − s δy²) Tᵏ⁺¹ = (1 + s δx²) T*;

s = αΔt / (2Δx²) is Crank–Nicolson-ADI for the heat equation (second order in space and
time); s = 1/ρ is the ADI iteration with parameter ρ for Laplace's equation (ρ = 2 gives
the line relaxation of Zolfaghari 2018, eqs. 3–4). Edge nodes are identity rows of the
tridiagonal systems and keep their values (Dirichlet). Wei et al. 2013's eqs. 4–5 take the
fully implicit A_P = 1 + 2r in both half steps, a first-order splitting; it is not offered.

The step is computed in delta form, algebraically the same (δx² and δy² commute here):

    (1 − s δx²) ΔT* = 2s (δx² + δy²) Tᵏ,   (1 − s δy²) ΔT = ΔT*,   Tᵏ⁺¹ = Tᵏ + ΔT.

The solves then deliver the small increment, not the field: with r = 100 in float32 the
field form loses ~1e-5 (relative) per step to the conditioning of the line systems
(cond ≈ 1 + 4s), the delta form ~1e-7.

Layout: the field is T[j, i] (j along y, i along x, C order); x-lines are contiguous systems
(axis -1). The y-lines ("sweep"):
  "strided":   solved along axis 0 of the same array (systems interleaved: coalesced for
               thread-per-system solvers such as pta, strided for block-per-system ones);
  "transpose": ΔT* is transposed (a tiled kernel), the y-lines are solved as contiguous
               systems, and the increment is added back transposed (Wei et al. 2013, Fig. 3c:
               two transposes per step).
Array passes per step (n² itemsize bytes each, reads + writes): right-hand side 2, each
solve 5 (a, b, c, d, x), update 3; the transpose adds 2: 15 strided, 17 transposed.
"""
from __future__ import annotations

import numpy as np

import tridiag
from gpucfd.errors import ConvergenceError, InputError

from ..kernels.adi_rhs import adi_pass
from ..layout import array_module

SWEEPS = ("strided", "transpose")


class ADI:
    """ADI stepping of a field ``t0`` (n, n) NumPy or CuPy array, float32 or float64.

    method, options: the tridiag.solve method and its options. Direct methods run with
    check=False (call :meth:`check_finite` at the end); checkerboard starts each solve from
    its right-hand side and raises ConvergenceError at its cap. The field is ``t`` (n, n).
    ``solved_by`` records, per solve axis, the method used (what "auto" chose);
    ``inner_iterations`` sums the checkerboard iterations (largest over the lines, per solve).
    """

    def __init__(self, t0, method: str = "auto", sweep: str = "strided", options: dict | None = None):
        if sweep not in SWEEPS:
            raise InputError(f"--sweep must be one of {', '.join(SWEEPS)} (got {sweep!r})")
        if t0.ndim != 2 or t0.shape[0] != t0.shape[1] or t0.shape[0] < 3:
            raise InputError(f"the field must be n x n with n >= 3 (got shape {tuple(t0.shape)})")
        xp = self.xp = array_module((t0,))
        self.t = xp.array(t0, order="C")
        self.half = xp.empty_like(self.t)
        self.d = xp.empty_like(self.t)
        self.method, self.sweep, self.options = method, sweep, dict(options or {})
        self.solved_by: dict = {}
        self.inner_iterations = 0
        self._coefficients: dict = {}

    @property
    def n(self) -> int:
        return self.t.shape[0]

    def bytes_per_step(self) -> int:
        """Bytes the step's passes read and write (see the module docstring)."""
        return (17 if self.sweep == "transpose" else 15) * self.t.size * self.t.itemsize

    def coefficients(self, s: float):
        """(off, diag) arrays (n, n) of 1 - s δ²: -s and 1 + 2s inside, 0 and 1 on the edges.

        The edge mask is symmetric, so the same arrays serve x- and y-lines in either layout;
        they are built once per s (full size, so that tridiag.solve copies nothing)."""
        if s not in self._coefficients:
            xp, n = self.xp, self.n
            off = xp.zeros((n, n), self.t.dtype)
            diag = xp.ones((n, n), self.t.dtype)
            off[1:-1, 1:-1] = -s
            diag[1:-1, 1:-1] = 1 + 2 * s
            self._coefficients[s] = (off, diag)
        return self._coefficients[s]

    def step(self, s: float):
        """One Peaceman–Rachford step with coefficient s; returns the increment ΔT (an array
        overwritten by the next step; transposed with sweep="transpose")."""
        off, diag = self.coefficients(s)
        adi_pass(self.t, self.d, 2 * s, laplacian=True)  # 2s (δx² + δy²) Tᵏ
        self._solve(off, diag, self.d, -1, self.half)  # x-lines: ΔT*
        if self.sweep == "transpose":
            adi_pass(self.half, self.d, transpose=True)
            self._solve(off, diag, self.d, -1, self.half)  # y-lines, contiguous: ΔTᵀ
            adi_pass(self.half, self.t, accumulate=True, transpose=True)
            return self.half
        self._solve(off, diag, self.half, 0, self.d)  # y-lines, interleaved: ΔT
        self.t += self.d
        return self.d

    def _solve(self, off, diag, rhs, axis: int, out) -> None:
        opts = dict(self.options)
        iterative = self.method == "checkerboard"
        if iterative:
            opts["x0"] = rhs
        info: dict = {}
        tridiag.solve(off, diag, off, rhs, method=self.method, axis=axis, out=out, check=iterative,
                      info=info, **opts)
        self.solved_by[axis] = info["method"] + (f" {info['options']}" if info["options"] else "")
        if iterative:
            self.inner_iterations += int(np.abs(info["iterations"]).max())

    def check_finite(self, what: str = "ADI") -> None:
        """ConvergenceError (reason "diverged") if the field holds inf or NaN."""
        if not bool(self.xp.isfinite(self.t).all()):
            raise ConvergenceError(f"{what}: the field holds inf/NaN after {self.method} solves "
                                   "(overflow or a broken-down solve)", "diverged")
