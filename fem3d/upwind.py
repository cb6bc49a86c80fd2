"""Streamline-upwind parameter tau with the nodally exact coefficients of quadratic elements.

For a test node i and frozen velocity a (Kao & Sheu 2018, eq. 6)

    tau_i = sum_k delta_k(i) |a_k| h_k / (2 |a|^2),

with a_k = a . e_k the velocity along the element's local direction k, h_k the
element length along it, Pe_k = |a_k| h_k Re / 2 the element Peclet number and
delta the optimal coefficient of the node's class in that direction: an end node
(xi_k = +-1) or a middle node (xi_k = 0) of the quadratic element. Both are the
values that make the 1D consistent Petrov-Galerkin quadratic element nodally
exact for a u' - nu u'' = 0 (derived symbolically; tests/test_upwind.py checks
the exactness on a 1D mesh):

    delta_mid(Pe) = (coth(Pe/2) - 2/Pe) / 2
    delta_end(Pe) = [Pe(1 - 3t - 3t^2 + t^3) - 1 + 7t - 7t^2 + t^3]
                  / [Pe(1 - 7t + 7t^2 - t^3) + 6(1 - t - t^2 + t^3)],  t = exp(-Pe).

Both behave as Pe/12 for small Pe; delta_mid -> 1/2, delta_end -> 1 as Pe -> inf.
"""
from __future__ import annotations

SERIES_BELOW = 0.15  # |Pe| under which the Taylor series replaces the closed forms
LARGE = 1e12  # larger Pe are evaluated here (the coefficients differ from their limits by ~1/Pe)


def delta_mid(xp, pe):
    """Optimal coefficient of middle nodes, elementwise for Pe >= 0."""
    small = pe < SERIES_BELOW
    p = xp.where(small, 1.0, xp.minimum(pe, LARGE))
    closed = 0.5 / xp.tanh(0.5 * p) - 1.0 / p
    p2 = pe * pe
    series = pe * (1.0 / 12 + p2 * (-1.0 / 720 + p2 * (1.0 / 30240 + p2 * (-1.0 / 1209600 + p2 / 47900160))))
    return xp.where(small, series, closed)


def delta_end(xp, pe):
    """Optimal coefficient of end (corner-side) nodes, elementwise for Pe >= 0."""
    small = pe < SERIES_BELOW
    p = xp.where(small, 1.0, xp.minimum(pe, LARGE))
    t = xp.exp(-p)
    t2, t3 = t * t, t * t * t
    closed = (p * (1 - 3 * t - 3 * t2 + t3) - 1 + 7 * t - 7 * t2 + t3) / (p * (1 - 7 * t + 7 * t2 - t3) + 6 * (1 - t - t2 + t3))
    p2 = pe * pe
    series = pe * (1.0 / 12 + p2 * (1.0 / 1440 + p2 * (-109.0 / 241920 + p2 * (277.0 / 1935360 + p2 * (-337571.0 / 7664025600 + p2 * 1131324167.0 / 83691159552000)))))
    return xp.where(small, series, closed)


def tau(xp, a, J, re, mid_mask):
    """tau per quadrature point and test node.

    a        (E, Q, 3) frozen velocity at quadrature points
    J        (E, Q, 3, 3) Jacobian, J[..., i, k] = d x_i / d xi_k
    re       Reynolds number
    mid_mask (n_nodes, 3) bool, True where node i is a middle node in direction k
    returns  (E, Q, n_nodes)
    """
    col = xp.sqrt((J * J).sum(axis=-2))  # |d x / d xi_k|, (E, Q, 3)
    h = 2.0 * col
    a_k = xp.abs(xp.einsum("eqi,eqik->eqk", a, J)) / col
    a2 = (a * a).sum(axis=-1)
    weight = xp.where(a2[..., None] > 0, a_k * h / (2.0 * xp.where(a2 > 0, a2, 1.0)[..., None]), 0.0)
    pe = 0.5 * re * a_k * h
    d_mid = delta_mid(xp, pe) * weight
    d_end = delta_end(xp, pe) * weight
    mid = xp.asarray(mid_mask, dtype=a.dtype)
    return xp.einsum("eqk,nk->eqn", d_mid, mid) + xp.einsum("eqk,nk->eqn", d_end, 1.0 - mid)
