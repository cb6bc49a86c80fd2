"""Peaceman–Rachford ADI for the 5-point problem −∇²u = f on a 2D node grid: the one
double sweep of every 2D case (heat conduction, the stream-function equation).

A double sweep with parameter ρ > 0 (δxx, δyy: second differences in grid units, hx, hy the
spacings) is, in delta form and scaled by 1/ρ (sx = 1/(ρ hx²), sy = 1/(ρ hy²)):

    (1 − sx δxx) D = 2 (sx δxx + sy δyy) u + (2/ρ) f,   (1 − sy δyy) Δ = D,   u ← u + Δ,

algebraically the textbook (ρ − δxx/hx²) u* = (ρ + δyy/hy²) u + f, (ρ − δyy/hy²) u⁺ = (ρ + δxx/hx²) u* + f
(D = 2 (u* − u)). Fixed nodes (the box edge and any ``fixed`` node) are identity rows with
right-hand side 0: they keep their values. The solves deliver the small increment, not the
field: with ρ h² = 1/50 in float32 the field form loses ~1e-5 (relative) per sweep to the
conditioning of the line systems (cond ≈ 1 + 4s), the delta form ~1e-7.

Uses: Crank–Nicolson ADI for ∂u/∂t = α∇²u is ρ = 2/(αΔt) with f = 0 (second order in space
and time); the ADI iteration for the steady problem cycles ρ through :func:`parameters`.

Two implementations, one interface (``sweep(u, rho, source=None)``, ``delta``, ``describe()``):
:class:`LibraryADI` builds the right-hand sides with one tiled kernel (tridiag.kernels.adi_rhs,
NumPy reference beside it) and solves the lines by a tridiag.solve method in the layouts of a
:class:`~tridiag.cases.line_solver.LineSolver`; :class:`FusedADI` does each half in one launch
(tridiag.kernels.line_sweeps). :func:`make_adi` picks one for a ``--solver`` name.
"""

from __future__ import annotations

import math

import numpy as np

import tridiag

from ..kernels import line_sweeps
from ..kernels.adi_rhs import adi_pass
from .line_solver import ITERATIVE, LineSolver, resolve_solver, solve_axis, storage_transposed


def spectrum(shape, hx: float, hy: float) -> tuple:
    """(low, high): the smallest and largest eigenvalue of −δxx/hx² and −δyy/hy² on the lines of
    an (ny, nx) node grid with fixed ends, λ_m = 4/h² sin²(mπ / (2(n − 1))), m = 1 … n − 2."""
    bounds = [
        (4 / h**2 * math.sin(math.pi / (2 * (n - 1))) ** 2, 4 / h**2 * math.cos(math.pi / (2 * (n - 1))) ** 2)
        for n, h in zip(shape, (hy, hx))
    ]
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


def parameters(low: float, high: float, count: int) -> list:
    """``count`` ADI parameters ρ, geometric over the spectrum [low, high], largest first:
    ρ_k = high (low/high)^((k + ½)/count); count = 1 is the best single parameter √(low high)."""
    return [high * (low / high) ** ((k + 0.5) / count) for k in range(count)]


def free_mask(shape, fixed=None) -> np.ndarray:
    """Host float64 (ny, nx): 1 at free nodes, 0 on the box edge and at ``fixed`` (host bool) nodes."""
    free = np.zeros(shape)
    free[1:-1, 1:-1] = 1
    if fixed is not None:
        free[np.asarray(fixed, dtype=bool)] = 0
    return free


class LibraryADI:
    """Double sweeps on fields of ``shape`` (ny, nx) and ``dtype`` in the array module ``xp``,
    solved by the library ``solver`` (a LineSolver) with tridiag.solve ``options``.

    fixed: host bool (ny, nx) mask of fixed interior nodes (None: the box edge only). After a
    sweep, ``delta`` holds Δ (an (ny, nx) view); ``solved_by`` the method used per direction
    (what "tuned" chose; :meth:`describe` says it). ``iterative``: the solver iterates to a
    tolerance and reads its iteration counts back (no CUDA-graph capture); ``inner_iterations``
    then sums them (largest over the lines, per solve), else it is None."""

    def __init__(
        self,
        xp,
        shape,
        dtype,
        solver: LineSolver,
        hx: float = 1.0,
        hy: float = 1.0,
        fixed=None,
        options: dict | None = None,
    ):
        self.xp, self.shape, self.dtype, self.solver = xp, tuple(shape), np.dtype(dtype), solver
        self.hx, self.hy, self.options = hx, hy, dict(options or {})
        self.free = free_mask(self.shape, fixed)
        self.fixed = None if fixed is None else xp.asarray(fixed, dtype=bool)
        self.symmetric = self.shape[0] == self.shape[1] and bool((self.free == self.free.T).all())
        self.transposed = {s: storage_transposed(s, solver.layouts) for s in "xy"}
        grid, flipped = self.shape, self.shape[::-1]
        x_shape = flipped if self.transposed["x"] else grid
        y_shape = flipped if self.transposed["y"] else grid
        self.x_rhs, self.x_out = xp.empty(x_shape, self.dtype), xp.empty(x_shape, self.dtype)
        if self.transposed["x"] == self.transposed["y"]:  # the y-lines solve D where it lies
            self.y_rhs, self.y_out = self.x_out, self.x_rhs
        else:  # D is transposed into the free buffer first
            self.y_rhs = self.x_rhs if x_shape == y_shape else xp.empty(y_shape, self.dtype)
            self.y_out = self.x_out if x_shape == y_shape else xp.empty(y_shape, self.dtype)
        self.iterative = solver.name in ITERATIVE
        self.solved_by: dict = {}
        self.inner_iterations = 0 if self.iterative else None
        self._rows: dict = {}

    def describe(self) -> str:
        """The methods that solved the x- and y-lines (after a sweep) and the layouts."""
        solved = " / ".join(self.solved_by.get(s, self.solver.method) for s in "xy")
        return f"{solved} ({'/'.join(self.solver.layouts)} x/y lines)"

    @property
    def delta(self):
        """Δ of the last sweep as an (ny, nx) view."""
        return self.y_out.T if self.transposed["y"] else self.y_out

    def rows(self, s: float, transposed: bool):
        """(off, diag) of 1 − s δ² in the given storage: −s and 1 + 2s at free nodes, 0 and 1 at
        fixed ones; built once per (s, storage), shared by both storages of a symmetric mask."""
        key = (s, transposed and not self.symmetric)
        if key not in self._rows:
            free = self.free.T if key[1] else self.free
            self._rows[key] = (
                self.xp.asarray(-s * free, dtype=self.dtype),
                self.xp.asarray(1 + 2 * s * free, dtype=self.dtype),
            )
        return self._rows[key]

    def sweep(self, u, rho: float, source=None):
        """One double sweep of ``u`` (ny, nx) in place with parameter ρ and source f (None: 0);
        returns Δ (:attr:`delta`)."""
        sx, sy = 1 / (rho * self.hx**2), 1 / (rho * self.hy**2)
        tx, ty = self.transposed["x"], self.transposed["y"]
        adi_pass(
            u,
            self.x_rhs,
            2 * sy,
            2 * sx,
            laplacian=True,
            transpose=tx,
            fixed=self.fixed,
            source=source,
            coef_source=2 / rho,
        )
        self._solve("x", self.rows(sx, tx), self.x_rhs, self.x_out)
        if tx != ty:
            adi_pass(self.x_out, self.y_rhs, transpose=True)
        self._solve("y", self.rows(sy, ty), self.y_rhs, self.y_out)
        adi_pass(self.y_out, u, accumulate=True, transpose=ty)
        return self.delta

    def _solve(self, along: str, rows, rhs, out) -> None:
        off, diag = rows
        opts = dict(self.options, x0=rhs) if self.iterative else self.options
        info: dict = {}
        tridiag.solve(
            off,
            diag,
            off,
            rhs,
            method=self.solver.method,
            axis=solve_axis(along, self.transposed[along]),
            out=out,
            check=self.iterative,
            info=info,
            **opts,
        )
        self.solved_by[along] = info["method"] + (f" {info['options']}" if info["options"] else "")
        if self.iterative:
            self.inner_iterations += int(np.abs(info["iterations"]).max())

    def passes(self) -> int:
        """Field-sized array passes (reads + writes) of a sweep: right-hand side 2, each solve
        5 (a, b, c, d, x), the final update 3, a transpose between the directions 2."""
        return 15 + 2 * (self.transposed["x"] != self.transposed["y"])


class FusedADI:
    """Double sweeps in two launches (tridiag.kernels.line_sweeps: ``adi_first`` along x, then
    ``adi_second`` along y) on CuPy fields; allocates nothing per sweep. ``fixed``: device bool
    (ny, nx) mask of every fixed node, box edge included. ``keep_delta``: store Δ in ``delta``
    (one more pass; else ``delta`` is None)."""

    def __init__(self, xp, shape, dtype, hx: float = 1.0, hy: float = 1.0, fixed=None, keep_delta: bool = False):
        line_sweeps.check_fits(shape, dtype)
        self.hx, self.hy = hx, hy
        self.fixed = xp.asarray(free_mask(shape, None if fixed is None else fixed) == 0)
        self.d = xp.empty(shape, dtype)
        self.delta = xp.empty(shape, dtype) if keep_delta else None
        self.iterative = False
        self.inner_iterations = None

    def describe(self) -> str:
        return "fused"

    def sweep(self, u, rho: float, source=None):
        """As :meth:`LibraryADI.sweep` (returns ``delta``, None unless kept)."""
        sx, sy = 1 / (rho * self.hx**2), 1 / (rho * self.hy**2)
        line_sweeps.adi_first_cuda(u, source, self.fixed, self.d, "x", sx, sy, 2 / rho)
        line_sweeps.adi_second_cuda(self.d, self.fixed, u, self.delta, "y", sy)
        return self.delta

    def passes(self) -> int:
        """Field-sized array passes of a sweep: u read and D written, D read and u updated."""
        return 5 + (self.delta is not None)


def make_adi(
    xp,
    shape,
    dtype,
    solver: str,
    hx: float = 1.0,
    hy: float = 1.0,
    fixed=None,
    layout: str = "auto",
    options: dict | None = None,
    keep_delta: bool = False,
    iterative: bool = False,
):
    """The ADI of line solver ``solver`` (tridiag.cases.line_solver.NAMES, with ``layout``) for the
    array module ``xp``: FusedADI or LibraryADI ("auto" on a GPU: tuned, contiguous lines, the
    fastest for the sweep alone). ``iterative`` admits the checkerboard solver."""
    choice = resolve_solver(
        solver,
        xp is not np,
        max(shape),
        max(shape) <= line_sweeps.longest_line(dtype),
        layout,
        iterative,
        fused_first=False,
    )
    if choice.fused:
        return FusedADI(xp, shape, dtype, hx, hy, fixed, keep_delta)
    return LibraryADI(xp, shape, dtype, choice, hx, hy, fixed, options)
