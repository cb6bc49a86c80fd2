"""Channel with a square cylinder (Breuer et al. 2000 set-up): geometry, boundary values, outflow.

Units: cylinder side D = 1, maximum inflow velocity U_max = 1, so Re = 1/ν and time is in D/U_max.
The channel is [0, L] × [0, H] with H = 8, L = 50; the cylinder is centred at x = L/4 = 12.5 on
the centre-line y = H/2. A grid is named ``ny x nx`` cells as in the paper (160x800: hy = D/20,
hx = D/16), nodes (ny+1, nx+1), fields (ny+1, nx+1) arrays as in tridiag.cases.vorticity.

Cylinder faces lie on grid lines: each face is snapped down (toward smaller x or y) to the
nearest grid line when it falls inside a cell (200x1000: hy = 0.04 D, the faces at y = 3.5,
4.5 fall mid-cell and become 3.48, 4.48; the side stays D, the body sits hy/2 below the
centre-line, which also seeds the wake asymmetry).

Boundary conditions (ψ, ω):
- inflow x = 0: parabolic u = 4 y (H − y) / H², v = 0: ψ = ∫u dy, ω = −du/dy (exact node values);
- channel walls y = 0, H: no slip, ψ = 0 and ψ = Q = 2H/3, Thom wall vorticity;
- cylinder: no slip, ψ = ψ_in(y_c) (= Q/2 when centred) on its surface and inside, Thom vorticity
  on its faces and corners;
- outflow x = L: ∂ψ/∂x = 0 (v = 0, second-order one-sided) and convective ∂ω/∂t + U_c ∂ω/∂x = 0
  with U_c = Q/H = 2/3 the mean velocity, implicit upwind in time (unconditionally stable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import InputError

from ..layout import array_module
from .vorticity import Boundary, Grid

HEIGHT = 8.0  # H / D (blockage D/H = 1/8)
LENGTH = 50.0  # L / D
X_CENTRE = LENGTH / 4  # cylinder centre, D from the inlet
FLUX = 2.0 * HEIGHT / 3.0  # Q = ∫u dy of the parabolic inflow with U_max = 1
CONVECTIVE_SPEED = FLUX / HEIGHT  # U_c of the outflow condition: the mean velocity
GRIDS = ("160x800", "200x1000", "400x2000")  # the paper's grids, ny x nx cells


def parse_grid(text: str, option: str = "--grid") -> tuple:
    """(ny, nx) cells from "NYxNX" (e.g. "160x800"); InputError naming ``option`` otherwise."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise InputError(f"{option} must look like 160x800 (ny x nx cells; got {text!r})")
    ny, nx = int(parts[0]), int(parts[1])
    if ny < 16 or nx < 50:
        raise InputError(f"{option} needs at least 16 x 50 cells, so that the cylinder spans grid cells (got {text!r})")
    return ny, nx


def inflow_psi(y):
    """ψ of the parabolic inflow, ∫₀^y 4 s (H − s) / H² ds = 2y²/H − 4y³/(3H²)."""
    return 2 * y**2 / HEIGHT - 4 * y**3 / (3 * HEIGHT**2)


def inflow_u(y):
    """u = 4 y (H − y) / H² of the parabolic inflow (U_max = 1 at y = H/2)."""
    return 4 * y * (HEIGHT - y) / HEIGHT**2


def inflow_omega(y):
    """ω = −du/dy = −4 (H − 2y) / H² of the parabolic inflow."""
    return -4 * (HEIGHT - 2 * y) / HEIGHT**2


@dataclass(frozen=True)
class Channel:
    """Grid and cylinder of a ``ny x nx``-cell channel.

    body: node index ranges (j_low, j_high, i_front, i_rear), faces included; faces: their
    coordinates (y_low, y_high, x_front, x_rear); psi_body: the stream function on the body.
    """

    grid: Grid
    body: tuple
    faces: tuple
    psi_body: float

    @classmethod
    def create(cls, ny: int, nx: int) -> "Channel":
        grid = Grid.box(LENGTH, HEIGHT, nx, ny)
        cells_y, cells_x = max(1, round(1 / grid.hy)), max(1, round(1 / grid.hx))
        j_low = math.floor((HEIGHT / 2 - 0.5) / grid.hy + 1e-9)
        i_front = math.floor((X_CENTRE - 0.5) / grid.hx + 1e-9)
        body = (j_low, j_low + cells_y, i_front, i_front + cells_x)
        faces = (body[0] * grid.hy, body[1] * grid.hy, body[2] * grid.hx, body[3] * grid.hx)
        return cls(grid, body, faces, float(inflow_psi(0.5 * (faces[0] + faces[1]))))

    @property
    def centre(self) -> tuple:
        """(x, y) of the cylinder centre after snapping."""
        return 0.5 * (self.faces[2] + self.faces[3]), 0.5 * (self.faces[0] + self.faces[1])

    @property
    def size(self) -> tuple:
        """(width, height) of the snapped cylinder in D."""
        return self.faces[3] - self.faces[2], self.faces[1] - self.faces[0]

    def fixed_mask(self) -> np.ndarray:
        """Host bool (ny+1, nx+1): the box edge and the cylinder (surface and inside)."""
        fixed = np.zeros(self.grid.shape, dtype=bool)
        fixed[0] = fixed[-1] = True
        fixed[:, 0] = fixed[:, -1] = True
        j0, j1, i0, i1 = self.body
        fixed[j0 : j1 + 1, i0 : i1 + 1] = True
        return fixed

    def boundary(self, xp, dtype=np.float64) -> Boundary:
        """Boundary with Thom walls on the channel walls and the cylinder only: the inflow and
        outflow columns are fixed nodes whose values :func:`initial_fields` and
        tridiag.kernels.channel_flow's outflow write."""
        solid = self.fixed_mask()
        solid[1:-1, 0] = solid[1:-1, -1] = False
        return Boundary.create(xp, self.grid, self.fixed_mask(), dtype=dtype, solid=solid)

    def initial_fields(self, xp, dtype=np.float64):
        """(ψ, ω) device arrays: the undisturbed parabolic channel flow, the cylinder at
        ``psi_body`` with ω = 0 (an impulsive start)."""
        _, y = self.grid.coordinates()
        psi = np.repeat(inflow_psi(y)[:, None], self.grid.nx, axis=1)
        omega = np.repeat(inflow_omega(y)[:, None], self.grid.nx, axis=1)
        j0, j1, i0, i1 = self.body
        psi[j0 : j1 + 1, i0 : i1 + 1] = self.psi_body
        omega[j0 : j1 + 1, i0 : i1 + 1] = 0.0
        psi[-1] = FLUX  # exact value on the upper wall
        return xp.asarray(psi, dtype=dtype), xp.asarray(omega, dtype=dtype)


def section_flux(u, grid: Grid, i: int, rows=None) -> float:
    """∫u dy over the nodes ``rows`` (a slice; default all) of column ``i`` by the trapezoid rule
    (host float; u an (ny, nx) array on either backend)."""
    xp = array_module((u,))
    col = u[rows if rows is not None else slice(None), i]
    return float(grid.hy * (xp.sum(col) - 0.5 * (col[0] + col[-1])))


def pressure_mismatch(omega, channel: Channel, re: float) -> float:
    """(1/Re) ∮ ∂ω/∂n ds around the cylinder (n into the fluid, host float): the change of
    pressure (ρU_max² units) along a closed path on the no-slip body surface, zero for a
    single-valued pressure (see :func:`normal_vorticity_flux`)."""
    return float(normal_vorticity_flux(omega, channel)) / re


def normal_vorticity_flux(omega, channel: Channel):
    """∮ ∂ω/∂n ds around the cylinder as a device scalar: ∂ω/∂n by second-order one-sided
    differences at the face nodes, trapezoid rule along each face (corners count on both of
    their faces). On a no-slip wall ∂p/∂s = (1/Re) ∂ω/∂n."""
    xp = array_module((omega,))
    g = channel.grid
    j0, j1, i0, i1 = channel.body
    faces = (  # (wall, 1st and 2nd fluid nodes along the normal, spacing along the face, normal spacing)
        (omega[j0 : j1 + 1, i0], omega[j0 : j1 + 1, i0 - 1], omega[j0 : j1 + 1, i0 - 2], g.hy, g.hx),
        (omega[j0 : j1 + 1, i1], omega[j0 : j1 + 1, i1 + 1], omega[j0 : j1 + 1, i1 + 2], g.hy, g.hx),
        (omega[j0, i0 : i1 + 1], omega[j0 - 1, i0 : i1 + 1], omega[j0 - 2, i0 : i1 + 1], g.hx, g.hy),
        (omega[j1, i0 : i1 + 1], omega[j1 + 1, i0 : i1 + 1], omega[j1 + 2, i0 : i1 + 1], g.hx, g.hy),
    )
    total = 0.0
    for wall, first, second, ds, dn in faces:
        dwdn = (-3 * wall + 4 * first - second) / (2 * dn)
        total = total + ds * (xp.sum(dwdn) - 0.5 * (dwdn[0] + dwdn[-1]))
    return total
