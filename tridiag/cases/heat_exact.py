"""Exact solutions of the two heat-conduction cases (NumPy, float64).

Unsteady: on the square [0, L]², edges held at 0, the mode T = sin(kx πx/L) sin(ky πy/L)
decays as exp(-α π² (kx² + ky²) t / L²); it is also an eigenvector of the 5-point Laplacian
on the nodes x = iΔx, which decays at rate α (μ(kx) + μ(ky)) / Δx², μ(k) = 4 sin²(kπΔx / 2L)
(the semi-discrete solution: the exact solution of the spatially discretised problem).

Steady: the unit square with the edge y = 1 at T1 and the other edges at 0 (Beck et al.
2008; ../shared/reference/SOURCES.md):
T(x, y) = (4 T1 / π) Σ_{m odd} sin(mπx) sinh(mπy) / (m sinh(mπ)); T(½, ½) = T1 / 4.
"""

from __future__ import annotations

import numpy as np


def mode_rate(kx: int, ky: int, length: float, alpha: float = 1.0, dx: float | None = None) -> float:
    """Decay rate (1/s) of mode (kx, ky): continuous, or of the 5-point Laplacian with spacing dx."""
    if dx is None:
        return alpha * np.pi**2 * (kx * kx + ky * ky) / length**2
    mu = [4 * np.sin(m * np.pi * dx / (2 * length)) ** 2 for m in (kx, ky)]
    return alpha * sum(mu) / dx**2


def decaying_mode(x, y, t: float, length: float, kx: int = 1, ky: int = 1, alpha: float = 1.0, dx: float | None = None):
    """sin(kx πx/L) sin(ky πy/L) exp(-rate t) on broadcast x, y (rate from :func:`mode_rate`)."""
    amp = np.exp(-mode_rate(kx, ky, length, alpha, dx) * t)
    return amp * np.sin(kx * np.pi * np.asarray(x) / length) * np.sin(ky * np.pi * np.asarray(y) / length)


def steady_series(x, y, t1: float = 100.0, terms: int = 20000):
    """The series at broadcast points (x, y) of the unit square, y < 1, first ``terms`` odd terms.

    sinh(mπy)/sinh(mπ) is evaluated as exp(mπ(y-1)) (1 - e^{-2mπy}) / (1 - e^{-2mπ}); the
    terms fall like exp(-mπ(1-y)), so ``terms`` >> 1/(1-y) is needed near the hot edge."""
    x, y = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
    total = np.zeros(x.shape)
    for m in range(1, 2 * terms, 2):
        ratio = np.exp(m * np.pi * (y - 1)) * -np.expm1(-2 * m * np.pi * y) / -np.expm1(-2 * m * np.pi)
        total += np.sin(m * np.pi * x) * ratio / m
    return 4 * t1 / np.pi * total
