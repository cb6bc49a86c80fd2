"""Gauss rules on surfaces of a HexMesh: its boundary faces, and the cut of a plane
x, y or z = c through it. Each rule is given as elements, reference points and weights
(area vectors on faces), so that a field of the elements is integrated by evaluating it there.

Faces: n x n Gauss points on each face's reference square, weighted by the outward area
vector (the cross product of the two tangent vectors of the face's own geometry map).
With n = 3 a Q2 field's flux is exact on faces of trilinear and triquadratic elements
(degree at most 5 in each face coordinate).

Plane cuts: in each element that the plane crosses, the reference axis k along which the
plane's coordinate changes most (at the centre) is the one across the plane; each point
(s, t) of the other two reference axes is moved along xi_k onto the plane by Newton's
method (one step for a trilinear map) and kept where it falls inside the element. The
weight is w_s w_t |det J| / |dx_axis / dxi_k|, the area element of the cut in the plane.
A box element's cut is a reference plane xi_k = constant, so n x n Gauss points on the
(s, t) square are exact for a Q2 field there, as they are accurate for any cut that spans
the square (checked at a 3 x 3 lattice of it). A cut that leaves its element sideways (a
tilted or curved element, the plane meeting its face xi_k = +-1) ends inside the square:
such squares are cut into four, the quarters that the cut spans taking the Gauss rule and
the others cut again, DEPTH times, so that the cut's edge is resolved to 2^-DEPTH of the
element (the area of a cut is then within 1e-6 on a jittered trilinear 4^3 cube, and 1e-3
on the coarse annulus of 64 curved elements, its planes cutting the curved faces). Points
on a face between two elements (a plane along element faces) count half in each, so each
part of the plane counts once, also where the two elements lie on different ranks.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import einsum
from .element import FACES, gauss_legendre
from .geometry import SAMPLES, determinant, geometry_element

DEPTH = 6  # halvings of the squares that a cut's edge crosses: the edge is resolved to 2^-DEPTH of an element
BATCH = 65536  # element-point pairs of a plane cut handled at once (a few tens of MB)
NEWTON = 10  # iterations putting a point on the plane (converged in 4 or 5 where the point exists)
TOL = 1e-9  # reference distance within which a point counts as on an element's face


def face_points(face: int, n: int = 3) -> np.ndarray:
    """(n^2, 3) the reference points of the n x n Gauss rule on local face ``face`` (FACES order)
    of the reference cube, as :func:`face_rule` orders them."""
    k, side = FACES[face]
    g = gauss_legendre(n)[0]
    ref = np.empty((n * n, 3))
    ref[:, k], ref[:, (k + 1) % 3], ref[:, (k + 2) % 3] = 2 * side - 1, np.repeat(g, n), np.tile(g, n)
    return ref


def face_rule(mesh, faces: np.ndarray, n: int = 3):
    """Gauss rule on the faces ``faces`` (F, 2) (element, local face in FACES order) of ``mesh``:
    elements (F, Q), reference points (F, Q, 3), physical points (F, Q, 3) and outward area
    vectors (F, Q, 3), the weights included (length units squared: a face's sum over Q is its
    area vector), Q = n^2."""
    w = gauss_legendre(n)[1]
    weights = np.repeat(w, n) * np.tile(w, n)
    elements = np.repeat(faces[:, :1], n * n, axis=1)
    xi, points, area = (np.empty((len(faces), n * n, 3)) for _ in range(3))
    for f, (k, side) in enumerate(FACES):
        rows = np.flatnonzero(faces[:, 1] == f)
        a, b = (k + 1) % 3, (k + 2) % 3  # e_a x e_b = e_k
        ref = face_points(f, n)
        X = mesh.geometry_of(faces[rows, 0])
        geo = geometry_element(X.shape[1])
        J = einsum(np, "qgk,egi->eqik", geo.gradients(ref), X)
        xi[rows] = ref
        points[rows] = einsum(np, "qg,egi->eqi", geo.values(ref), X)
        area[rows] = (2 * side - 1) * np.cross(J[..., a], J[..., b]) * weights[:, None]
    return elements, xi, points, area


def plane_rule(mesh, axis: int, value: float, n: int = 3, depth: int = DEPTH):
    """Gauss rule on the cut of the plane x_axis = ``value`` through ``mesh`` (module
    docstring; ``depth``: the levels of squares where the cut ends inside the square):
    elements (P,), reference points (P, 3) and weights (P,) (length units squared: their
    sum is the cut's area)."""
    X = mesh.geometry
    geo = geometry_element(X.shape[1])
    along = X[:, :, axis]
    sampled = along @ geo.values(SAMPLES).T  # (E, 125): a curved element bulges past its nodes, hardly past these
    lo, hi = sampled.min(axis=1), sampled.max(axis=1)
    pad = (0.05 if geo.degree == 2 else TOL) * (hi - lo)
    e = np.flatnonzero((lo - pad <= value) & (value <= hi + pad))
    k = np.argmax(np.abs(along[e] @ geo.gradients(np.zeros((1, 3)))[0]), axis=1)  # steepest at the centre
    centre, half = np.zeros((len(e), 2)), np.ones(len(e))
    lattice = np.stack([np.repeat([-1.0, 0.0, 1.0], 3), np.tile([-1.0, 0.0, 1.0], 3)], axis=1)
    corners = np.stack([np.repeat([-0.5, 0.5], 2), np.tile([-0.5, 0.5], 2)], axis=1)
    squares = []
    for level in range(depth + 1):
        if level == depth:
            squares.append((e, k, centre, half))
            break
        inside = _on_plane(X, geo, axis, value, e, k, centre, half, lattice)[1].reshape(len(e), 9)
        whole = inside.all(axis=1)
        squares.append((e[whole], k[whole], centre[whole], half[whole]))
        split = ~whole & (inside.any(axis=1) | (level < 2))  # a small cut may miss the first probes
        e, k, half = np.repeat(e[split], 4), np.repeat(k[split], 4), np.repeat(half[split] / 2, 4)
        centre = (centre[split][:, None] + corners * 2 * half.reshape(-1, 4, 1)).reshape(-1, 2)
    e, k, centre, half = (np.concatenate(a) for a in zip(*squares))
    g, w = gauss_legendre(n)
    points = np.stack([np.repeat(g, n), np.tile(g, n)], axis=1)
    xi, inside = _on_plane(X, geo, axis, value, e, k, centre, half, points)
    e, k, xi = np.repeat(e, n * n)[inside], np.repeat(k, n * n)[inside], xi[inside]
    weight = (np.repeat(half**2, n * n) * np.tile(np.repeat(w, n) * np.tile(w, n), len(half)))[inside]
    J = einsum(np, "pgk,pgi->pik", geo.gradients(xi), X[e])
    rows = np.arange(len(e))
    weight *= np.abs(determinant(np, J) / J[rows, axis, k])  # the cut's area element
    boundary = np.zeros((mesh.n_elements, 6), dtype=bool)
    boundary[mesh.boundary_faces[:, 0], mesh.boundary_faces[:, 1]] = True
    shared = (np.abs(xi[rows, k]) >= 1 - TOL) & ~boundary[e, 2 * k + (xi[rows, k] > 0)]
    weight[shared] *= 0.5  # a point on a face between two elements: each has half
    return e, xi, weight


def _on_plane(X, geo, axis, value, elements, across, centre, half, points):
    """Each of ``points`` (Q, 2) scaled into each square (``centre`` (m, 2), ``half`` (m,)
    its half side) of the (s, t) reference coordinates of ``elements`` (m,) other than
    ``across`` (m,), moved along xi_across onto the plane by Newton's method: reference
    points (m Q, 3) and whether each lies on the plane inside its element (m Q,)."""
    q = len(points)
    xi = np.empty((len(elements) * q, 3))
    inside = np.empty(len(elements) * q, dtype=bool)
    chunk = max(1, BATCH // q)
    for s in range(0, len(elements), chunk):
        part = slice(s * q, (s + len(elements[s : s + chunk])) * q)
        xi[part], inside[part] = _solve(
            X,
            geo,
            axis,
            value,
            elements[s : s + chunk],
            across[s : s + chunk],
            (centre[s : s + chunk, None] + half[s : s + chunk, None, None] * points).reshape(-1, 2),
        )
    return xi, inside


def _solve(X, geo, axis, value, elements, across, st):
    """Reference points (m Q, 3) with the other coordinates ``st`` (m Q, 2) whose xi_across
    puts them on the plane, and whether they lie inside their element (m Q,)."""
    q = len(st) // max(len(elements), 1)
    e, k = np.repeat(elements, q), np.repeat(across, q)
    line = _line(geo, X[e, :, axis], k, st)  # x_axis along each point's reference line
    t = np.zeros(len(e))
    todo = np.arange(len(e))
    for _ in range(NEWTON):  # one step where the map is trilinear (linear in xi_k)
        table = geo.tables_1d(t[todo])
        x, slope = (einsum(np, "pj,pj->p", table[i], line[todo]) for i in (0, 1))
        step = (value - x) / np.where(slope == 0, np.inf, slope)
        t[todo] = np.clip(t[todo] + step, -2.0, 2.0)
        todo = todo[(np.abs(step) > 1e-14) & (np.abs(t[todo]) < 2.0)]  # at 2: far outside
        if not todo.size:
            break
    rows = np.arange(len(e))
    xi = np.empty((len(e), 3))
    xi[rows, k], xi[rows, (k + 1) % 3], xi[rows, (k + 2) % 3] = t, st[:, 0], st[:, 1]
    miss = np.abs(einsum(np, "pj,pj->p", geo.tables_1d(t)[0], line) - value)
    size = np.abs(line).max(axis=1) + np.ptp(line, axis=1)
    return xi, (miss <= TOL * size) & (np.abs(t) <= 1 + TOL)


def _line(geo, Xa, k, st):
    """(P, m) x_axis at the m nodes of each point's reference line along xi_k (k (P,)), its
    other coordinates (xi_k+1, xi_k+2) being ``st`` (P, 2), from the elements' geometry
    nodes' x_axis ``Xa`` (P, G), G = m^3 in tensor order."""
    m = geo.degree + 1
    nodes = Xa.reshape(-1, m, m, m)  # [p, zeta, eta, xi]
    out = np.empty((len(Xa), m))
    letter = "xyz"
    for d in range(3):
        sel = k == d
        a, b = (geo.tables_1d(st[sel, i])[0] for i in (0, 1))
        out[sel] = einsum(np, f"pzyx,p{letter[(d + 1) % 3]},p{letter[(d + 2) % 3]}->p{letter[d]}", nodes[sel], a, b)
    return out
