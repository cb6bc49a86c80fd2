"""Geometry map of hexahedral elements: Jacobians, physical derivatives, validity checks.

An element's shape is x(xi) = sum_g G_g(xi) X_g with G the Q1 (8 geometry nodes:
trilinear map) or Q2 (27 nodes: triquadratic map) basis, nodes in tensor order.
Arrays are batched over elements: X has shape (E, n_geo, 3).
"""
from __future__ import annotations

import numpy as np

from .element import Q1, Q2, LagrangeHex
from gpucfd.errors import InputError


def geometry_element(n_geo: int) -> LagrangeHex:
    """The Lagrange element describing the map for ``n_geo`` geometry nodes (8 or 27)."""
    if n_geo == 8:
        return Q1
    if n_geo == 27:
        return Q2
    raise InputError(f"geometry nodes per element must be 8 or 27 (got {n_geo})")


def jacobians(xp, X, dG):
    """J[e, q, i, k] = d x_i / d xi_k, shape (E, Q, 3, 3), from X (E, G, 3) and dG (Q, G, 3)."""
    return xp.tensordot(X, dG, axes=([1], [1])).transpose(0, 2, 1, 3)  # one matrix product (einsum is 10x slower)


def determinant(xp, J):
    """Determinant (...) of batched 3x3 matrices J (..., 3, 3)."""
    return (J[..., 0, 0] * (J[..., 1, 1] * J[..., 2, 2] - J[..., 1, 2] * J[..., 2, 1])
            + J[..., 0, 1] * (J[..., 1, 2] * J[..., 2, 0] - J[..., 1, 0] * J[..., 2, 2])
            + J[..., 0, 2] * (J[..., 1, 0] * J[..., 2, 1] - J[..., 1, 1] * J[..., 2, 0]))


def det_and_inverse(xp, J):
    """Determinant (E, Q) and inverse (E, Q, 3, 3) of batched 3x3 matrices by cofactors.

    ``inv[..., k, i] = d xi_k / d x_i``.
    """
    a, b, c = J[..., 0, 0], J[..., 0, 1], J[..., 0, 2]
    d, e, f = J[..., 1, 0], J[..., 1, 1], J[..., 1, 2]
    g, h, i = J[..., 2, 0], J[..., 2, 1], J[..., 2, 2]
    c00, c01, c02 = e * i - f * h, f * g - d * i, d * h - e * g
    det = determinant(xp, J)
    cof_t = xp.stack(
        [
            xp.stack([c00, c * h - b * i, b * f - c * e], axis=-1),
            xp.stack([c01, a * i - c * g, c * d - a * f], axis=-1),
            xp.stack([c02, b * g - a * h, a * e - b * d], axis=-1),
        ],
        axis=-2,
    )
    return det, cof_t / det[..., None, None]


def check_elements(X: np.ndarray, element_ids: np.ndarray | None = None, rel_tol: float = 1e-12) -> None:
    """Raise InputError naming the first element whose map is inverted or degenerate.

    The Jacobian determinant is checked at the element's 27 Q2 node positions
    (corners, edge and face midpoints, centre); it must exceed ``rel_tol`` times the
    element's volume scale.
    """
    geo = geometry_element(X.shape[1])
    dG = geo.gradients(Q2.nodes)
    det = np.empty((X.shape[0], Q2.n_nodes))
    for s in range(0, X.shape[0], 2048):  # temporaries of a few MB: reused from the heap, no fresh pages
        det[s:s + 2048] = determinant(np, jacobians(np, X[s:s + 2048], dG))
    extent = X.max(axis=1) - X.min(axis=1)
    scale = np.prod(np.maximum(extent, 1e-300), axis=1) / 8.0
    bad = np.flatnonzero((det.min(axis=1) <= rel_tol * scale) | ~np.isfinite(det).all(axis=1))
    if bad.size:
        e = bad[0]
        q = int(np.argmin(det[e]))
        eid = int(element_ids[e]) if element_ids is not None else int(e)
        where = tuple(float(v) for v in Q2.nodes[q])
        raise InputError(
            f"element {eid} is inverted or degenerate (Jacobian determinant {det[e, q]:.3g} at reference point {where}); "
            f"{bad.size} bad element(s) in total"
        )
