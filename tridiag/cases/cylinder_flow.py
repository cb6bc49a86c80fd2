"""Time marching of the channel flow past a square cylinder (tridiag.cases.channel) with the shared
vorticity–stream-function core (tridiag.cases.vorticity_solver).

The run starts from the undisturbed parabolic channel flow with the cylinder inserted
(tridiag.cases.channel.Channel.initial_fields) and START_SWEEPS ψ sweeps that adjust ψ to the body
(without them the first steps' Thom vorticity blows up on fine grids at CFL 1). Each step: the
core's step (Thom wall vorticity, Peaceman–Rachford ADI of the vorticity transport,
``psi_sweeps`` ADI sweeps of ∇²ψ = −ω), the outflow column (tridiag.kernels.channel_flow),
with body="pressure" the cylinder's ψ from single-valued pressure (tridiag.cases.body_pressure),
then the probe value v = −∂ψ/∂x at the probe node and ψ on the cylinder are recorded on the
device (copied to the host at each check). Fields are (ny+1, nx+1) device arrays; time in D/U_max.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import Backend, to_numpy
from gpucfd.errors import ConvergenceError, InputError

from ..kernels.channel_flow import for_module
from .body_pressure import PressureBodyValue
from .channel import CONVECTIVE_SPEED, Channel, pressure_mismatch
from .vorticity import wall_vorticity
from .vorticity_solver import VorticitySolver

BODY = ("fixed", "pressure")  # the cylinder's ψ: ψ_in(y_c), or from single-valued pressure (body_pressure)
CFL = {"unsteady": 0.5, "steady": 1.0}  # default U_max Δt / min(hx, hy)
KICK_OFFSET = (1.0, 0.5)  # start-up vortex blob: (x, y) from the rear face centre, in D
KICK_RADIUS = 0.5
COUPLING = 0.5  # largest default wall coupling number Δt / (Re h²): at 1.0 the steady march at Re 10
# on 200x1000 cells drifts away (residual growing from t ≈ 10; 4 ψ sweeps diverge by t = 3); at 0.5 it falls steadily
CFL_LIMIT = 5.0  # largest convective CFL number run: blow-ups were seen from about 9 (40x250, Re 100)
START_SWEEPS = 32  # ψ sweeps before the first step: the flow's initial adjustment to the body
MAX_KICK = 100.0  # strongest start-up blob: far beyond the wake's own vorticity (of order 10 near the body)
ARRAYS = 58  # (ny+1)(nx+1)-node arrays of the field dtype at the peak of a run (fields, line systems, solver work)
HOST_ARRAYS = 8  # float64 (ny+1)(nx+1)-node arrays of its results on the host (fields, snapshots, pictures)
PSI1_ARRAYS = 24  # float64 arrays of the ψ₁ solve of a float32 run with body="pressure" (a float64 core, freed after)


def field_arrays(dtype, body: str) -> float:
    """Field-sized arrays of ``dtype`` a run needs at its peak: ARRAYS, and in float32 with
    body="pressure" the float64 ψ₁ solve on top (tridiag.cases.body_pressure)."""
    itemsize = np.dtype(dtype).itemsize
    return ARRAYS + (PSI1_ARRAYS * 8 / itemsize if body == "pressure" and itemsize < 8 else 0)


def default_dt(channel: Channel, cfl: float, re: float) -> float:
    """Δt = min(cfl · min(hx, hy) / U_max, COUPLING · Re · min(hx, hy)²): the convective target
    (the core's CFL number max(|u|Δt/hx + |v|Δt/hy) came out at 1.3–1.9 × cfl) capped by the wall
    coupling number Δt / (Re h²) <= COUPLING."""
    h = min(channel.grid.hx, channel.grid.hy)
    return min(cfl * h, COUPLING * re * h**2)


class CylinderFlow:
    """State (ψ, ω, t) of one run and its probe time series.

    probe: (x, y) in D; the nearest interior node is used (``probe_node`` gives its coordinates).
    body: "fixed" or "pressure" (BODY); body_field: ψ₁ of an earlier run on the same channel
    (``flow.body.psi1``) to skip its solve.
    """

    def __init__(
        self,
        backend: Backend,
        channel: Channel,
        re: float,
        dt: float,
        solver: str = "thomas",
        psi_sweeps: int = 2,
        dtype=np.float64,
        probe: tuple | None = None,
        body: str = "pressure",
        body_field=None,
        layout: str = "auto",
    ):
        xp = backend.xp
        self.backend, self.xp, self.channel, self.grid = backend, xp, channel, channel.grid
        y_c = channel.centre[1]
        px, py = probe if probe is not None else (channel.faces[3] + 2.0, y_c)
        g = self.grid
        i, j = round(px / g.hx), round(py / g.hy)
        if not (1 <= i <= g.nx - 2 and 1 <= j <= g.ny - 2) or bool(channel.fixed_mask()[j, i]):
            raise InputError(f"--probe ({px:g}, {py:g}) must lie in the fluid, inside the channel")
        self.probe_index = (j, i)
        self.probe_node = (i * g.hx, j * g.hy)
        self.boundary = channel.boundary(xp, dtype)
        self.core = VorticitySolver(
            backend, self.boundary, re, dt, solver=solver, psi_sweeps=psi_sweeps, dtype=dtype, layout=layout
        )
        self.psi, self.omega = channel.initial_fields(xp, dtype)
        for _ in range(START_SWEEPS):
            self.core.poisson_sweep(self.psi, self.omega)
        if body not in BODY:
            raise InputError(f"--body must be one of {', '.join(BODY)} (got {body!r})")
        self.body = PressureBodyValue(self, body_field) if body == "pressure" else None
        self.steps = 0
        self.times, self.signal, self.body_psi = [], [], []  # host series, one entry per step
        self.kernels = for_module(xp)
        self.record = xp.zeros((0, 2), dtype)  # (v at the probe, ψ on the cylinder) per step since the last check
        self.recorded = xp.zeros(1, np.int32)  # rows of record filled

    @property
    def dt(self) -> float:
        return self.core.dt

    def kick(self, amplitude: float) -> None:
        """Add a Gaussian vortex blob ω = amplitude · exp(−r²/r₀²) (r₀ = 0.5 D) above the wake axis,
        1 D behind the rear face: the asymmetric start-up that triggers shedding."""
        if amplitude == 0:
            return
        x, y = self.grid.coordinates()
        x0 = self.channel.faces[3] + KICK_OFFSET[0]
        y0 = self.channel.centre[1] + KICK_OFFSET[1]
        blob = amplitude * np.exp(-((x[None, :] - x0) ** 2 + (y[:, None] - y0) ** 2) / KICK_RADIUS**2)
        blob[self.channel.fixed_mask()] = 0.0
        self.omega += self.xp.asarray(blob, dtype=self.omega.dtype)

    @property
    def t(self) -> float:
        """Time reached, in D/U_max."""
        return self.steps * self.core.dt

    def step(self) -> None:
        """One time step of (ψ, ω), the outflow column, the cylinder's ψ and the probe record:
        kernels only (replayable from a CUDA graph); the step count follows at :meth:`_flush`."""
        self.core.step(self.psi, self.omega)
        self.kernels["outflow"](self.psi, self.omega, CONVECTIVE_SPEED * self.core.dt / self.grid.hx)
        if self.body is not None:
            self.body.correct(self.psi, self.omega)
        j, i = self.probe_index
        j0, _, i0, _ = self.channel.body
        nx = self.grid.nx
        self.kernels["probe"](self.psi, j * nx + i, j0 * nx + i0, 0.5 / self.grid.hx, self.record, self.recorded)

    def advance(self, count: int) -> None:
        """``count`` steps without checks (on the GPU with fused sweeps, from a CUDA graph), then
        the probe values to the host."""
        self._reserve(count)
        self.core.advance(count, self.step)
        self._flush()

    def _reserve(self, count: int) -> None:
        """Room for ``count`` steps in the probe record (allocated outside any graph capture)."""
        if self.record.shape[0] < count:
            self.record = self.xp.zeros((count, 2), self.record.dtype)

    def _flush(self) -> None:
        """Move the recorded probe and body values to the host series and count their steps."""
        count = int(self.recorded[0])
        if count:
            values = to_numpy(self.record[:count]).astype(np.float64)
            times = (self.steps + 1 + np.arange(count)) * self.core.dt
            self.times.extend(times.tolist())
            self.signal.extend(values[:, 0].tolist())
            self.body_psi.extend(values[:, 1].tolist())
            self.steps += count
            self.recorded[0] = 0

    def run(self, steps: int, check_every: int = 100, tol: float | None = None, progress=None) -> dict:
        """Up to ``steps`` steps by the core's march (its residual and divergence checks every
        ``check_every`` steps, and the CFL guard :meth:`check_cfl`); ``progress(self, residuals,
        stability)`` is called at each check. With ``tol``, stop once the steady residual is <= tol.
        Returns the core's {"steps", "converged", "residual", "history"}."""

        def monitor() -> dict:
            self._flush()
            return self.check_cfl()

        self._reserve(check_every)

        report = None if progress is None else (lambda done, res, stable: progress(self, res, stable))
        return self.core.march(self.psi, self.omega, steps, tol, check_every, report, step=self.step, monitor=monitor)

    def check_cfl(self) -> dict:
        """The core's stability numbers now; ConvergenceError naming the limit if the convective
        CFL number exceeds CFL_LIMIT (central-difference ADI is then unstable or, short of a
        blow-up, far from time-accurate)."""
        stable = self.core.stability(self.psi)
        if not stable["cfl"] <= CFL_LIMIT:
            raise ConvergenceError(
                f"time step too large for the convective CFL condition at step {self.steps} (t = {self.t:g}): "
                f"dt = {self.dt:g} gives max(|u|dt/hx + |v|dt/hy) = {stable['cfl']:.3g} > {CFL_LIMIT:g}; runs are "
                f"stable at CFL <= 2: use dt <= {stable['dt_limit']:.3g}",
                "CFL",
            )
        return stable

    def pressure_loop(self) -> float:
        """(1/Re) ∮ ∂ω/∂n ds around the cylinder with the wall vorticity of the current ψ (host
        float, ρU_max² units): zero for a single-valued pressure."""
        scratch = self.omega.copy()
        wall_vorticity(self.psi, scratch, self.boundary)
        return pressure_mismatch(scratch, self.channel, self.core.re)

    def load(self, other: "CylinderFlow") -> None:
        """Start from ``other``'s fields (same grid), e.g. a developed wake at another Re."""
        self.psi[...] = other.psi
        self.omega[...] = other.omega
