"""Anderson acceleration of a fixed-point iteration x <- g(x).

With residuals f_k = g(x_k) - x_k and the differences of the last ``depth`` steps
dF_i = f_{i+1} - f_i, dG_i = g(x_{i+1}) - g(x_i), the next iterate is

    x_{k+1} = g(x_k) - sum_i gamma_i dG_i,   gamma = argmin || f_k - sum_i gamma_i dF_i ||,

optionally damped: x_{k+1} = x_k + beta f_k - sum_i gamma_i (dX_i + beta dF_i).
For the Picard iteration of the Navier-Stokes equations it damps the oscillations
of plain Picard at higher Reynolds numbers and enlarges its domain of convergence
(Pollock, Rebholz & Xiao, SIAM J. Numer. Anal. 57, 2019). The small least-squares
problem uses only dot products, so a distributed run needs one reduction per step.
"""

from __future__ import annotations

import numpy as np


class Anderson:
    """Anderson mixing of depth ``depth`` (0: plain fixed point) with damping ``beta`` in (0, 1]."""

    def __init__(self, depth: int, beta: float = 1.0, dot=None):
        self.depth = depth
        self.beta = beta
        self.dot = dot or (lambda a, b: float(a @ b))
        self.dF: list = []
        self.dG: list = []
        self._f = None
        self._g = None

    def step(self, x, gx):
        """Next iterate from the current one ``x`` and its image ``gx`` = g(x)."""
        f = gx - x
        if self._f is not None and self.depth > 0:
            self.dF.append(f - self._f)
            self.dG.append(gx - self._g)
            if len(self.dF) > self.depth:
                self.dF.pop(0)
                self.dG.pop(0)
        self._f, self._g = f, gx
        nxt = x + self.beta * f
        if not self.dF:
            return nxt
        k = len(self.dF)
        gram = np.array([[self.dot(self.dF[i], self.dF[j]) for j in range(k)] for i in range(k)])
        rhs = np.array([self.dot(self.dF[i], f) for i in range(k)])
        gamma = np.linalg.lstsq(gram, rhs, rcond=1e-12)[0]
        for i in range(k):
            dX = self.dG[i] - self.dF[i]
            nxt -= gamma[i] * (dX + self.beta * self.dF[i])
        return nxt
