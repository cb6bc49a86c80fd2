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
Since h_k = 2 |dx/dxi_k|, a_k h_k / 2 = |a . dx/dxi_k|: tau_i depends on a only through
s_k = a . dx/dxi_k and |a|^2, which :func:`tau_and_derivative` differentiates for the
Newton Jacobian of the stabilised equations.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import einsum
from ..kernels.quadrature import tau_cuda

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
    closed = (p * (1 - 3 * t - 3 * t2 + t3) - 1 + 7 * t - 7 * t2 + t3) / (
        p * (1 - 7 * t + 7 * t2 - t3) + 6 * (1 - t - t2 + t3)
    )
    p2 = pe * pe
    series = pe * (
        1.0 / 12
        + p2
        * (
            1.0 / 1440
            + p2
            * (
                -109.0 / 241920
                + p2 * (277.0 / 1935360 + p2 * (-337571.0 / 7664025600 + p2 * 1131324167.0 / 83691159552000))
            )
        )
    )
    return xp.where(small, series, closed)


def delta_mid_derivative(xp, pe):
    """d delta_mid / d Pe, elementwise for Pe >= 0."""
    small = pe < SERIES_BELOW
    p = xp.where(small, 1.0, xp.minimum(pe, LARGE))
    t = xp.exp(-p)
    closed = 1.0 / (p * p) - t / ((1.0 - t) * (1.0 - t))
    p2 = pe * pe
    series = 1.0 / 12 + p2 * (-3.0 / 720 + p2 * (5.0 / 30240 + p2 * (-7.0 / 1209600 + p2 * 9.0 / 47900160)))
    return xp.where(small, series, closed)


def delta_end_derivative(xp, pe):
    """d delta_end / d Pe, elementwise for Pe >= 0."""
    small = pe < SERIES_BELOW
    p = xp.where(small, 1.0, xp.minimum(pe, LARGE))
    t = xp.exp(-p)
    t2, t3 = t * t, t * t * t
    num = p * (1 - 3 * t - 3 * t2 + t3) - 1 + 7 * t - 7 * t2 + t3
    den = p * (1 - 7 * t + 7 * t2 - t3) + 6 * (1 - t - t2 + t3)
    d_num = (1 - 3 * t - 3 * t2 + t3) + p * (3 * t + 6 * t2 - 3 * t3) - 7 * t + 14 * t2 - 3 * t3
    d_den = (1 - 7 * t + 7 * t2 - t3) + p * (7 * t - 14 * t2 + 3 * t3) + 6 * (t + 2 * t2 - 3 * t3)
    closed = (d_num * den - num * d_den) / (den * den)
    p2 = pe * pe
    series = 1.0 / 12 + p2 * (
        3.0 / 1440
        + p2
        * (
            -5 * 109.0 / 241920
            + p2 * (7 * 277.0 / 1935360 + p2 * (-9 * 337571.0 / 7664025600 + p2 * 11 * 1131324167.0 / 83691159552000))
        )
    )
    return xp.where(small, series, closed)


def _directional(xp, a, J, re):
    """s_k = a . dx/dxi_k (E, Q, 3), |a|^2 (E, Q), Pe_k = Re |s_k| and the weight
    w_k = |s_k| / |a|^2 (0 where a = 0)."""
    s = einsum(xp, "eqi,eqik->eqk", a, J)
    a2 = (a * a).sum(axis=-1)
    safe = xp.where(a2 > 0, a2, 1.0)[..., None]
    w = xp.where(a2[..., None] > 0, xp.abs(s) / safe, 0.0)
    return s, a2, safe, re * xp.abs(s), w


def tau(xp, a, J, re, mid_mask):
    """tau per quadrature point and test node.

    a        (E, Q, 3) frozen velocity at quadrature points
    J        (E, Q, 3, 3) Jacobian, J[..., i, k] = d x_i / d xi_k
    re       Reynolds number
    mid_mask (n_nodes, 3) bool, True where node i is a middle node in direction k
    returns  (E, Q, n_nodes)

    On CuPy arrays one CUDA kernel (fem3d.kernels.quadrature.tau_cuda, Q2 nodes: n_nodes =
    27); the array code, used for NumPy, is its reference.
    """
    if xp is not np:
        return tau_cuda(a, J, re, mid_mask, False, SERIES_BELOW, LARGE)
    return _by_node(xp, *tau_by_direction(xp, a, J, re), mid_mask)


def tau_by_direction(xp, a, J, re):
    """The terms delta_k(Pe_k) w_k of tau of a middle node and of an end node along each
    direction k, (E, Q, 3) each: tau_i sums over k the term of node i's class along k."""
    _, _, _, pe, weight = _directional(xp, a, J, re)
    return delta_mid(xp, pe) * weight, delta_end(xp, pe) * weight


def _by_node(xp, per_mid, per_end, mid_mask):
    """sum_k over the directions of the middle-node or end-node value of each test node:
    per_* (E, Q, 3, ...) -> (E, Q, n_nodes, ...), as one matrix product with the 0/1
    table of node classes."""
    mid = np.asarray(mid_mask, dtype=np.float64)
    classes = xp.asarray(np.concatenate([mid, 1.0 - mid], axis=1).T)  # (6, n_nodes)
    per = xp.moveaxis(xp.concatenate([per_mid, per_end], axis=2), 2, -1)  # (E, Q, ..., 6)
    out = (per.reshape(-1, 6) @ classes).reshape(per.shape[:-1] + (classes.shape[1],))
    return xp.moveaxis(out, -1, 2)


def tau_and_derivative(xp, a, J, re, mid_mask):
    """tau (E, Q, n_nodes) as :func:`tau`, and d tau / d a (E, Q, n_nodes, 3); on CuPy
    arrays by one CUDA kernel, as :func:`tau`."""
    if xp is not np:
        return tau_cuda(a, J, re, mid_mask, True, SERIES_BELOW, LARGE)
    (t_mid, dt_mid), (t_end, dt_end) = tau_and_derivative_by_direction(xp, a, J, re)
    return _by_node(xp, t_mid, t_end, mid_mask), _by_node(xp, dt_mid, dt_end, mid_mask)


def tau_and_derivative_by_direction(xp, a, J, re):
    """((t_mid, dt_mid), (t_end, dt_end)): the terms of :func:`tau_by_direction` (E, Q, 3)
    and their derivatives dt[..., k, c] = d t_k / d a_c (E, Q, 3, 3).

    With s_k = a . J_k, w_k = |s_k| / |a|^2 and Pe_k = Re |s_k|:
    d w_k / d a_c = sign(s_k) J_ck / |a|^2 - 2 |s_k| a_c / |a|^4 and d Pe_k / d a_c = Re sign(s_k) J_ck.
    """
    s, a2, safe, pe, w = _directional(xp, a, J, re)
    sJ = xp.sign(s)[..., None, :] * J  # (E, Q, c, k): d|s_k| / d a_c
    moving = (a2 > 0)[..., None, None]
    dw = xp.where(
        moving, sJ / safe[..., None] - 2.0 * xp.abs(s)[..., None, :] * a[..., :, None] / (safe * safe)[..., None], 0.0
    )
    dw = dw.transpose(0, 1, 3, 2)  # (E, Q, k, c)
    dpe = re * sJ.transpose(0, 1, 3, 2)
    out = []
    for delta, derivative in ((delta_mid, delta_mid_derivative), (delta_end, delta_end_derivative)):
        d, dd = delta(xp, pe), derivative(xp, pe)
        out.append((d * w, dd[..., None] * dpe * w[..., None] + d[..., None] * dw))
    return out


def time_limited(xp, sigma: float, ref, taus: list, dref=None, dtaus=None):
    """The taus of a time step whose time derivative is approximated as sigma u - h (sigma in
    1/s, the scheme's coefficient of the new velocity): each multiplied by
    phi = (1 + (sigma tau_ref)^2)^(-1/2), one factor per point, with tau_ref (E, Q) the tau of
    a corner node (the sum of the end-node terms over the directions). tau phi tends to the
    steady tau for steps long against tau and to about 1 / sigma for short ones, as the time
    scale 2 / dt of Tezduyar's tau; one factor per point keeps each node's tau a sum of its
    class terms (the layout of the sum-factorised operator).

    taus: arrays (E, Q, n); with dref (E, Q, 3) = d tau_ref / d a and dtaus (E, Q, n, 3) their
    derivatives, returns (limited taus, their derivatives by the product rule), else
    (limited taus, None)."""
    st = sigma * ref
    phi = 1.0 / xp.sqrt(1.0 + st * st)
    limited = [t * phi[..., None] for t in taus]
    if dref is None:
        return limited, None
    dphi = (-sigma * st * phi**3)[..., None] * dref
    return limited, [dt * phi[..., None, None] + t[..., None] * dphi[:, :, None, :] for t, dt in zip(taus, dtaus)]


def corner_node(mid_mask) -> int:
    """A Q2 node that is an end node along every direction (its tau is tau_ref of :func:`time_limited`)."""
    return int(np.flatnonzero(~np.asarray(mid_mask).any(axis=1))[0])
