"""Exact solutions of the steady Navier-Stokes equations on the unit cube, for verification.

Each solution provides velocity(xp, x) -> (..., 3), pressure(xp, x) -> (...) and
force(xp, x) -> (..., 3) = (u . grad) u - lap(u) / Re + grad p at points x (..., 3)
(None where the flow needs no body force).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFlow:
    """Kao & Sheu 2018, section 5.1: u = (y^2 + z^2)/2, v = -z, w = y,
    p = (y^2 + z^2)/2 + 2x/Re, with zero body force. The velocity is quadratic, so it
    lies in the Q2 space; the pressure does not lie in the Q1 space."""

    re: float
    name: str = "paper"
    default_re = 100.0  # the paper does not state its Re for this case

    def velocity(self, xp, x):
        y, z = x[..., 1], x[..., 2]
        return xp.stack([0.5 * (y * y + z * z), -z, y], axis=-1)

    def pressure(self, xp, x):
        y, z = x[..., 1], x[..., 2]
        return 0.5 * (y * y + z * z) + 2.0 * x[..., 0] / self.re

    force = None  # the flow needs no body force


@dataclass(frozen=True)
class TrigFlow:
    """Smooth manufactured flow outside the discrete spaces (with s_x = sin(pi x), c_x = cos(pi x), ...):
    u = (s_x c_y c_z, c_x s_y c_z, -2 c_x c_y s_z) (divergence free), p = s_x s_y s_z,
    driven by the body force that makes it exact."""

    re: float
    name: str = "manufactured"
    default_re = 10.0  # Picard converges; at Re = 100 it does not (see fem3d.verify)

    @staticmethod
    def _trig(xp, x):
        px = math.pi * x
        return (
            xp.sin(px[..., 0]),
            xp.sin(px[..., 1]),
            xp.sin(px[..., 2]),
            xp.cos(px[..., 0]),
            xp.cos(px[..., 1]),
            xp.cos(px[..., 2]),
        )

    def velocity(self, xp, x):
        sx, sy, sz, cx, cy, cz = self._trig(xp, x)
        return xp.stack([sx * cy * cz, cx * sy * cz, -2.0 * cx * cy * sz], axis=-1)

    def pressure(self, xp, x):
        sx, sy, sz, _, _, _ = self._trig(xp, x)
        return sx * sy * sz

    def force(self, xp, x):
        sx, sy, sz, cx, cy, cz = self._trig(xp, x)
        pi = math.pi
        u = xp.stack([sx * cy * cz, cx * sy * cz, -2.0 * cx * cy * sz], axis=-1)
        grad_u = pi * xp.stack(
            [
                xp.stack([cx * cy * cz, -sx * sy * cz, -sx * cy * sz], axis=-1),
                xp.stack([-sx * sy * cz, cx * cy * cz, -cx * sy * sz], axis=-1),
                xp.stack([2.0 * sx * cy * sz, 2.0 * cx * sy * sz, -2.0 * cx * cy * cz], axis=-1),
            ],
            axis=-2,
        )  # grad_u[..., i, j] = d u_i / d x_j
        grad_p = pi * xp.stack([cx * sy * sz, sx * cy * sz, sx * sy * cz], axis=-1)
        convection = (grad_u * u[..., None, :]).sum(axis=-1)
        return convection + (3.0 * pi * pi / self.re) * u + grad_p


CASES = {"paper": PaperFlow, "manufactured": TrigFlow}
