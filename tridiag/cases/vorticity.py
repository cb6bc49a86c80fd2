"""Vorticity–stream-function discretisation on a uniform 2D node grid (NumPy or CuPy).

Equations (dimensionless): ∂ω/∂t + u ∂ω/∂x + v ∂ω/∂y = (1/Re) ∇²ω, ∇²ψ = −ω, with
u = ∂ψ/∂y, v = −∂ψ/∂x (so ω = ∂v/∂x − ∂u/∂y). Central differences throughout.

Fields are (ny, nx) arrays of node values: axis 0 = y (index j, y = y0 + j hy), axis 1 = x
(index i, x = x0 + i hx), x contiguous. Boundary conditions are given by nodes:

- ``fixed`` nodes keep the values the fields hold there (ψ and ω both): every node on the
  box edge, and any body (its surface and inside). Their rows in the line systems are
  identity rows, so a line crossing a body is solved straight through it. To prescribe a
  value, write it into the field (e.g. an inflow profile once, an outflow extrapolation
  between steps).
- ``walls`` are solid fixed nodes (all fixed nodes unless a ``solid`` mask says otherwise)
  with a fluid (non-fixed) neighbour; their ω is set from ψ by Thom's formula each step
  (``wall_vorticity``). A wall node is listed once per direction
  in which a fluid neighbour lies ("+x", "-x", "+y", "-y"); a node with two (a convex body
  corner) gets the mean of its two Thom values. Fixed nodes that are not walls (box
  corners, body interior, open boundaries) keep their ω: zero by default, inert.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucfd.errors import InputError

from ..layout import array_module

DIRECTIONS = {"+x": (0, 1), "-x": (0, -1), "+y": (1, 0), "-y": (-1, 0)}  # (dj, di) toward the fluid


@dataclass(frozen=True)
class Grid:
    """Uniform node grid: nx × ny nodes, spacings hx, hy, origin (x0, y0)."""

    nx: int
    ny: int
    hx: float
    hy: float
    x0: float = 0.0
    y0: float = 0.0

    @classmethod
    def box(cls, lx: float, ly: float, cells_x: int, cells_y: int, x0: float = 0.0, y0: float = 0.0) -> "Grid":
        """The rectangle [x0, x0+lx] × [y0, y0+ly] cut into cells_x × cells_y cells."""
        return cls(cells_x + 1, cells_y + 1, lx / cells_x, ly / cells_y, x0, y0)

    @property
    def shape(self) -> tuple:
        return (self.ny, self.nx)

    def coordinates(self):
        """Host arrays x (nx,) and y (ny,) of the node coordinates."""
        return self.x0 + self.hx * np.arange(self.nx), self.y0 + self.hy * np.arange(self.ny)


@dataclass
class Wall:
    """Wall nodes with a fluid neighbour in one direction, as flat indices (host arrays)."""

    direction: str  # "+x", "-x", "+y" or "-y": where the fluid neighbour lies
    nodes: np.ndarray  # flat index of each wall node
    neighbours: np.ndarray  # flat index of its fluid neighbour
    speed: np.ndarray  # dψ/ds at the wall along the direction s: the wall's tangential velocity


def distinct_nodes(walls: list) -> np.ndarray:
    """Sorted flat indices of the nodes of ``walls`` (host)."""
    return np.unique(np.concatenate([w.nodes for w in walls] or [np.zeros(0, np.int64)]))


@dataclass
class ThomTable:
    """Thom's formula at the K distinct wall nodes (device arrays), two direction slots each
    (a convex body corner has two fluid directions; an unused slot has coef 0 and nbr = node):
    ω = Σ_q coef[:, q] (ψ[nbr[:, q]] − ψ[node] − hspeed[:, q]) / count."""

    node: object  # (K,) int64 flat index
    nbr: object  # (K, 2) int64 flat index of the fluid neighbour
    coef: object  # (K, 2) −2/h² (h = hx or hy along the direction), field dtype
    hspeed: object  # (K, 2) h U_t, field dtype
    count: object  # (K,) directions per node (1 or 2), field dtype

    @classmethod
    def create(cls, xp, walls: list, grid: "Grid", dtype) -> "ThomTable":
        nodes = distinct_nodes(walls)
        nbr = np.repeat(nodes[:, None], 2, axis=1)
        coef, hspeed = np.zeros((nodes.size, 2)), np.zeros((nodes.size, 2))
        count = np.zeros(nodes.size)
        for w in walls:
            h = grid.hx if w.direction.endswith("x") else grid.hy
            k = np.searchsorted(nodes, w.nodes)
            q = (count[k] > 0).astype(np.int64)  # second direction of a corner node goes to slot 1
            nbr[k, q], coef[k, q], hspeed[k, q] = w.neighbours, -2 / h**2, h * w.speed
            count[k] += 1
        return cls(
            xp.asarray(nodes, dtype=np.int64),
            xp.asarray(nbr, dtype=np.int64),
            xp.asarray(coef, dtype=dtype),
            xp.asarray(hspeed, dtype=dtype),
            xp.asarray(count, dtype=dtype),
        )


@dataclass
class Boundary:
    """Fixed nodes and walls of a grid (device arrays); build with :meth:`create`."""

    grid: Grid
    fixed: object  # bool (ny, nx)
    free: object  # 1 at free nodes, 0 at fixed ones; (ny-2, nx-2), the interior, field dtype
    walls: list = field(default_factory=list)  # Wall per direction that has any
    thom: ThomTable | None = None  # Thom's formula at the distinct wall nodes
    wall_u: object = None  # velocity of the distinct wall nodes (ThomTable.node order)
    wall_v: object = None

    @property
    def wall_nodes(self):
        """Flat indices of the distinct wall nodes (device array)."""
        return self.thom.node

    @property
    def wall_count(self):
        """Directions per distinct wall node: 1, or 2 at a convex corner (device array)."""
        return self.thom.count

    @classmethod
    def create(cls, xp, grid: Grid, fixed, wall_u=0.0, wall_v=0.0, dtype=np.float64, solid=None) -> "Boundary":
        """Boundary of ``grid`` from a host bool (ny, nx) mask of fixed nodes, which must hold
        every box-edge node. Walls are the ``solid`` fixed nodes (host bool mask; default: every
        fixed node) next to a free node, so open boundaries (inflow, outflow) are left out by
        passing solid = walls and bodies only. wall_u, wall_v (scalars or host (ny, nx) arrays)
        give the wall velocity (its tangential part enters Thom's formula; both components are
        what :func:`velocity` reports there).
        """
        fixed = np.asarray(fixed, dtype=bool)
        if fixed.shape != grid.shape:
            raise InputError(f"fixed mask must have the grid shape {grid.shape} (got {fixed.shape})")
        if not (fixed[0].all() and fixed[-1].all() and fixed[:, 0].all() and fixed[:, -1].all()):
            raise InputError("every node on the box edge must be fixed (write open-boundary values into the fields)")
        wu = np.broadcast_to(np.asarray(wall_u, dtype=np.float64), grid.shape).ravel()
        wv = np.broadcast_to(np.asarray(wall_v, dtype=np.float64), grid.shape).ravel()
        ny, nx = grid.shape
        walled = fixed if solid is None else fixed & np.asarray(solid, dtype=bool)
        free_padded = np.pad(~fixed, 1, constant_values=False)
        walls = []
        for name, (dj, di) in DIRECTIONS.items():
            nodes = np.flatnonzero(walled & free_padded[1 + dj : 1 + dj + ny, 1 + di : 1 + di + nx])
            if nodes.size:
                speed = {"+y": wu, "-y": -wu, "+x": -wv, "-x": wv}[name][nodes]  # dψ/ds toward the fluid
                walls.append(Wall(name, nodes, nodes + dj * nx + di, speed))
        thom = ThomTable.create(xp, walls, grid, dtype)
        nodes = distinct_nodes(walls)
        return cls(
            grid,
            xp.asarray(fixed),
            xp.asarray(~fixed[1:-1, 1:-1], dtype=dtype),
            walls,
            thom,
            xp.asarray(wu[nodes], dtype=dtype),
            xp.asarray(wv[nodes], dtype=dtype),
        )


def wall_vorticity(psi, omega, boundary: Boundary, relaxation: float = 1.0) -> None:
    """Thom's formula ω_w = −2 (ψ_f − ψ_w − h U_t) / h² at every wall node, in place in ``omega``
    (under-relaxed: ω_w ← α ω_Thom + (1 − α) ω_w with α = ``relaxation``).

    ψ_f is the fluid neighbour at distance h (hx or hy) along the direction s toward the
    fluid and U_t = ∂ψ/∂s the wall's tangential velocity. First-order accurate at the wall
    (exact for ψ quadratic along s); a node with two fluid directions gets the mean.
    The NumPy reference of the thom kernel (tridiag.kernels.line_sweeps).
    """
    t = boundary.thom
    if t.node.size == 0:
        return
    p, flat = psi.reshape(-1), omega.reshape(-1)
    own = p[t.node]
    thom = (
        t.coef[:, 0] * (p[t.nbr[:, 0]] - own - t.hspeed[:, 0]) + t.coef[:, 1] * (p[t.nbr[:, 1]] - own - t.hspeed[:, 1])
    ) / t.count
    flat[t.node] = thom if relaxation == 1 else relaxation * thom + (1 - relaxation) * flat[t.node]


def velocity(psi, grid: Grid, boundary: Boundary | None = None):
    """(u, v) = (∂ψ/∂y, −∂ψ/∂x) at every node, (ny, nx) each: central differences inside,
    one-sided second-order differences on the box edge; with ``boundary``, wall nodes then
    take the wall velocity."""
    xp = array_module((psi,))
    u = _derivative(psi, grid.hy, axis=0, xp=xp)
    v = -_derivative(psi, grid.hx, axis=1, xp=xp)
    if boundary is not None and boundary.walls:
        u.reshape(-1)[boundary.wall_nodes] = boundary.wall_u
        v.reshape(-1)[boundary.wall_nodes] = boundary.wall_v
    return u, v


def _derivative(f, h, axis, xp):
    """∂f/∂(axis) with central differences inside and second-order one-sided ones at the ends."""
    f = xp.moveaxis(f, axis, 0)
    df = xp.empty_like(f)
    df[1:-1] = (f[2:] - f[:-2]) / (2 * h)
    df[0] = (-3 * f[0] + 4 * f[1] - f[2]) / (2 * h)
    df[-1] = (3 * f[-1] - 4 * f[-2] + f[-3]) / (2 * h)
    return xp.ascontiguousarray(xp.moveaxis(df, 0, axis))


def laplacian(f, grid: Grid):
    """Five-point ∇²f at the interior nodes, (ny-2, nx-2)."""
    c = f[1:-1, 1:-1]
    return (f[1:-1, 2:] - 2 * c + f[1:-1, :-2]) / grid.hx**2 + (f[2:, 1:-1] - 2 * c + f[:-2, 1:-1]) / grid.hy**2


def interior_velocity(psi, grid: Grid):
    """(u, v) by central differences at the interior nodes, (ny-2, nx-2) each."""
    return ((psi[2:, 1:-1] - psi[:-2, 1:-1]) / (2 * grid.hy), (psi[1:-1, :-2] - psi[1:-1, 2:]) / (2 * grid.hx))


def steady_residuals(psi, omega, re: float, boundary: Boundary):
    """Residuals of the steady discrete equations at the free nodes (device scalars, max norm):
    (|∇²ψ + ω|, |−u ∂ω/∂x − v ∂ω/∂y + ∇²ω/Re|, max |ω| over the free nodes)."""
    xp = array_module((psi,))
    g = boundary.grid
    u, v = interior_velocity(psi, g)
    wx = (omega[1:-1, 2:] - omega[1:-1, :-2]) / (2 * g.hx)
    wy = (omega[2:, 1:-1] - omega[:-2, 1:-1]) / (2 * g.hy)
    free = boundary.free
    r_psi = xp.abs((laplacian(psi, g) + omega[1:-1, 1:-1]) * free).max()
    r_omega = xp.abs((laplacian(omega, g) / re - u * wx - v * wy) * free).max()
    return r_psi, r_omega, xp.abs(omega[1:-1, 1:-1] * free).max()
