"""Host-side evaluation of grid fields: values between nodes and extrema located between nodes."""

from __future__ import annotations

import numpy as np

from .vorticity import Grid


def _weights(t):
    """Cubic Lagrange weights (m, 4) of the nodes -1, 0, 1, 2 at offsets t in [0, 1]."""
    t = t[:, None]
    nodes = np.array([-1.0, 0.0, 1.0, 2.0])
    w = np.ones((t.shape[0], 4))
    for k in range(4):
        for m in range(4):
            if m != k:
                w[:, k] *= (t[:, 0] - nodes[m]) / (nodes[k] - nodes[m])
    return w


def _stencil(coord, origin, h, n):
    """First node index of each point's 4-node stencil (clamped to the grid) and the weights."""
    s = (np.asarray(coord, dtype=np.float64) - origin) / h
    start = np.clip(np.floor(s).astype(int) - 1, 0, n - 4)
    return start, _weights(s - start - 1)


def sample(field, grid: Grid, x, y) -> np.ndarray:
    """Bicubic (4 × 4-node Lagrange) values of a host (ny, nx) field at points (x, y), arrays of
    one shape; exact for cubic polynomials, nodal values at nodes. Needs nx, ny >= 4."""
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    ix, wx = _stencil(x.ravel(), grid.x0, grid.hx, grid.nx)
    iy, wy = _stencil(y.ravel(), grid.y0, grid.hy, grid.ny)
    out = np.zeros(x.size)
    for a in range(4):
        for b in range(4):
            out += wy[:, a] * wx[:, b] * field[iy + a, ix + b]
    return out.reshape(x.shape)


def minimum(field, grid: Grid) -> dict:
    """The smallest value of a host (ny, nx) field, refined between nodes by a quadratic fit
    through the minimum node and its four neighbours: {"value", "x", "y"}."""
    j, i = np.unravel_index(int(np.argmin(field)), field.shape)
    x, y = grid.coordinates()
    value, px, py = float(field[j, i]), float(x[i]), float(y[j])
    if 0 < i < grid.nx - 1 and 0 < j < grid.ny - 1:
        for (lo, c, hi), h, axis in (
            ((field[j, i - 1], field[j, i], field[j, i + 1]), grid.hx, "x"),
            ((field[j - 1, i], field[j, i], field[j + 1, i]), grid.hy, "y"),
        ):
            slope, curv = (hi - lo) / 2, hi - 2 * c + lo
            if curv > 0:
                shift = -slope / curv
                value -= slope**2 / (2 * curv)
                if axis == "x":
                    px += shift * h
                else:
                    py += shift * h
    return {"value": value, "x": px, "y": py}
