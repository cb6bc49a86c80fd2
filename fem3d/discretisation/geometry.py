"""Geometry map of hexahedral elements: Jacobians, physical derivatives, validity checks.

An element's shape is x(xi) = sum_g G_g(xi) X_g with G the Q1 (8 geometry nodes:
trilinear map) or Q2 (27 nodes: triquadratic map) basis, nodes in tensor order.
Arrays are batched over elements: X has shape (E, n_geo, 3).
"""

from __future__ import annotations

import math

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
    return (
        J[..., 0, 0] * (J[..., 1, 1] * J[..., 2, 2] - J[..., 1, 2] * J[..., 2, 1])
        + J[..., 0, 1] * (J[..., 1, 2] * J[..., 2, 0] - J[..., 1, 0] * J[..., 2, 2])
        + J[..., 0, 2] * (J[..., 1, 0] * J[..., 2, 1] - J[..., 1, 1] * J[..., 2, 0])
    )


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


# det J and the quality measures are sampled on the 5x5x5 lattice of spacing 1/2: the 27 nodes, the
# nodes of the 8 children after one refinement and the interior extrema (+-1/2) of the 1D quadratic
# Lagrange functions. A negative sample proves a fold; no finite set proves det J > 0 everywhere.
SAMPLES = LagrangeHex(4).nodes
CHUNK = 512  # elements per batch: temporaries of a few MB, reused from the heap


def sample_jacobians(X: np.ndarray, points: np.ndarray = SAMPLES):
    """Yield (rows, J) over chunks of the elements X (E, G, 3): J[e, i, k, s] = d x_i / d xi_k at
    the reference points[s] (S, 3)."""
    n_geo = X.shape[1]
    dG = geometry_element(n_geo).gradients(points).transpose(1, 2, 0).reshape(n_geo, -1)  # (G, 3 S)
    for s in range(0, X.shape[0], CHUNK):
        Xt = np.ascontiguousarray(X[s : s + CHUNK].transpose(0, 2, 1)).reshape(-1, n_geo)  # (e 3, G)
        yield slice(s, s + CHUNK), (Xt @ dG).reshape(-1, 3, 3, len(points))  # one matrix product


def volume_scale(X: np.ndarray) -> np.ndarray:
    """Bounding-box volume / 8 of each element of X (E, G, 3): (E,), about |det J| of a box element."""
    return np.prod([np.ptp(X[:, :, d], axis=1) for d in range(3)], axis=0) / 8.0


def element_quality(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Aspect ratio and scaled Jacobian of each element of X (E, G, 3): two (E,) dimensionless arrays.

    With J_k = d x / d xi_k the k-th column of the Jacobian (the mapped reference axes) at each
    point of SAMPLES: aspect ratio = max over the points of max_k |J_k| / min_k |J_k| (the side
    ratio for a box); scaled Jacobian = min over the points of det J / (|J_1| |J_2| |J_3|), 1 for a
    box, <= 0 for an inverted or degenerate element (at the corners of a trilinear element it is
    Verdict's hex scaled Jacobian). For elements with no zero column (valid ones).
    """
    aspect, scaled = np.empty(X.shape[0]), np.empty(X.shape[0])
    for rows, J in sample_jacobians(X):
        n0, n1, n2 = (J * J).sum(axis=1).transpose(1, 0, 2)  # |J_k|^2, each (e, S)
        aspect[rows] = (np.maximum(np.maximum(n0, n1), n2) / np.minimum(np.minimum(n0, n1), n2)).max(axis=1)
        scaled[rows] = (determinant(np, J.transpose(0, 3, 1, 2)) / np.sqrt(n0 * n1 * n2)).min(axis=1)
    return np.sqrt(aspect), scaled


def check_elements(X: np.ndarray, element_ids: np.ndarray | None = None, rel_tol: float = 1e-12) -> None:
    """Raise InputError naming the first element whose map is inverted or degenerate anywhere.

    The Jacobian determinant of an element of X (E, G, 3) of geometry degree p is a polynomial
    of degree 3 p - 1 along each reference axis; from its values on that degree's lattice its
    Bernstein coefficients bound it from below on the whole element (:func:`determinant_bounds`).
    An element whose bound exceeds ``rel_tol`` times its volume scale is valid everywhere; the
    others are searched (:func:`_fold`) for a point where det J is below that, by halving the
    reference box where the bound does not decide, down to FOLD_DEPTH halvings.
    """
    floor = rel_tol * volume_scale(X)
    lower = determinant_bounds(X)
    for e in np.flatnonzero(~(lower > floor)):  # NaN is undecided, and a sample proves it bad
        fold = _fold(X[e], floor[e])
        if fold is None:
            continue
        det, where = fold
        eid = int(element_ids[e]) if element_ids is not None else int(e)
        bad = sum(_fold(X[f], floor[f]) is not None for f in np.flatnonzero(~(lower > floor)) if f != e) + 1
        raise InputError(
            f"element {eid} is inverted or degenerate (Jacobian determinant {det:.3g} at reference point "
            f"{tuple(round(float(v), 4) for v in where)}); {bad} bad element(s) in total: reorder its nodes if it "
            "is inside out, else move them so that it does not fold"
        )


FOLD_DEPTH = 8  # halvings of the reference box searched for a fold (a box of 1/256 of the element's side)


def _determinant_lattice(n_geo: int):
    """(the lattice of the determinant's degree on [-1, 1]^3 (M, 3) in tensor order, its
    degree d, the inverse (d+1, d+1) of the 1D Bernstein basis at the lattice's nodes)."""
    d = 3 * (round(n_geo ** (1 / 3)) - 1) - 1
    t = np.linspace(0.0, 1.0, d + 1)
    j = np.arange(d + 1)
    basis = np.array([math.comb(d, k) for k in j]) * t[:, None] ** j * (1 - t[:, None]) ** (d - j)
    return LagrangeHex(d).nodes, d, np.linalg.inv(basis)


def _lower_bound(values: np.ndarray, d: int, inverse: np.ndarray) -> np.ndarray:
    """The smallest Bernstein coefficient (m,) of the polynomials of degree d per axis with
    ``values`` (m, (d+1)^3) on the lattice (tensor order: x fastest)."""
    c = values.reshape(-1, d + 1) @ inverse.T  # along x, then y and z: (m, z, y, x) throughout
    c = (c.reshape(-1, d + 1, d + 1, d + 1).transpose(0, 1, 3, 2) @ inverse.T).transpose(0, 1, 3, 2)
    c = (c.transpose(0, 3, 2, 1) @ inverse.T).transpose(0, 3, 2, 1)
    return c.reshape(len(c), -1).min(axis=1)


def determinant_bounds(X: np.ndarray) -> np.ndarray:
    """A lower bound (E,) of det J over the whole reference cube of each element of X (E, G, 3)
    (length units cubed; NaN where X is): the smallest Bernstein coefficient of det J."""
    points, d, inverse = _determinant_lattice(X.shape[1])
    out = np.empty(X.shape[0])
    for rows, J in sample_jacobians(X, points):
        out[rows] = _lower_bound(determinant(np, J.transpose(0, 3, 1, 2)), d, inverse)
    return out


def _fold(X: np.ndarray, floor: float):
    """(det J, reference point) where det J of the element X (G, 3) is at most ``floor``, or
    None where its Bernstein bounds prove it above that: the reference cube halved where the
    bound does not decide, FOLD_DEPTH times at most (then the lattice's values decide)."""
    points, d, inverse = _determinant_lattice(X.shape[0])
    geo = geometry_element(X.shape[0])
    boxes = [(np.full(3, -1.0), 2.0)]  # (lowest corner, side) of the reference boxes to search
    for depth in range(FOLD_DEPTH + 1):
        if not boxes:
            return None
        corners, sides = np.array([c for c, _ in boxes]), np.array([h for _, h in boxes])
        at = corners[:, None] + sides[:, None, None] * (points[None] + 1) / 2  # (B, M, 3)
        dG = geo.gradients(at.reshape(-1, 3))
        det = determinant(np, jacobians(np, X[None], dG)).reshape(len(boxes), -1)
        low = np.nanargmin(np.where(np.isnan(det), -np.inf, det))
        if not det.flat[low] > floor:
            return float(det.flat[low]), at.reshape(-1, 3)[low]
        undecided = np.flatnonzero(~(_lower_bound(det, d, inverse) > floor))
        if depth == FOLD_DEPTH:
            return None
        half = sides[undecided] / 2
        boxes = [
            (corners[b] + half[i] * np.array(o), half[i]) for i, b in enumerate(undecided) for o in np.ndindex(2, 2, 2)
        ]
    return None
