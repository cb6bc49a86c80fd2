"""Finite element fields on a HexMesh: splitting the unknown vector, values at Gauss
points, L2 norms of errors against exact solutions, and values at physical points
(located in the mesh), along a centre line and over the mid-plane.

Global vector layout: [u (n_nodes) | v (n_nodes) | w (n_nodes) | p (n_pressure)].
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import einsum
from ..kernels.scatter import ScatterPlan
from .assembly import ReferenceTables, quadrature_geometry
from .geometry import determinant, jacobians


def split(x, n_nodes: int):
    """Views (u, v, w, p) of the global vector ``x``."""
    return x[:n_nodes], x[n_nodes : 2 * n_nodes], x[2 * n_nodes : 3 * n_nodes], x[3 * n_nodes :]


def nodal_velocity(xp, x, n_nodes: int):
    """(n_nodes, 3) velocity at the Q2 nodes."""
    u, v, w, _ = split(x, n_nodes)
    return xp.stack([u, v, w], axis=1)


def pressure_weights(backend, mesh, chunk: int = 8192):
    """(n_pressure,) integrals of the pressure basis functions, sum = domain volume."""
    xp = backend.xp
    tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
    local = xp.empty((mesh.n_elements, tables.M.shape[1]), dtype=np.float64)  # (E, 8) each element's integrals
    for s in range(0, mesh.n_elements, chunk):
        wq = determinant(xp, jacobians(xp, backend.asarray(mesh.geometry[s : s + chunk]), tables.dG)) * tables.w
        local[s : s + chunk] = wq @ tables.M
    return ScatterPlan(backend, mesh.pressure_cells).add(xp.zeros(mesh.n_pressure, dtype=np.float64), local.ravel())


def l2_errors(backend, mesh, x, velocity, pressure, n_gauss: int = 4, chunk: int = 4096, total=None) -> dict:
    """L2 norms of u_h - u, v_h - v, w_h - w and p_h - p (pressures compared up to a constant).

    velocity(xp, pts) -> (..., 3) and pressure(xp, pts) -> (...) exact solutions at
    physical points (..., 3); ``x`` is the global vector on ``backend``. On one rank's
    part of a distributed mesh, ``total(a)`` sums the host array ``a`` of integrals over
    the ranks. Returns dict with keys u, v, w, p.
    """
    xp = backend.xp
    tables = ReferenceTables.build(xp, mesh.geometry.shape[1], n_gauss)
    vel = nodal_velocity(xp, x, mesh.n_nodes)
    p_nodes = split(x, mesh.n_nodes)[3]
    cells = backend.asarray(mesh.cells)
    pcells = backend.asarray(mesh.pressure_cells)
    blocks = range(0, mesh.n_elements, chunk)

    def at_gauss_points(s):
        geo = quadrature_geometry(xp, backend.asarray(mesh.geometry[s : s + chunk]), tables)
        e_p = p_nodes[pcells[s : s + chunk]] @ tables.M.T - pressure(xp, geo["x"])
        return geo, e_p

    total = total or (lambda a: a)
    vol_mean = np.zeros(2)
    for s in blocks:  # first pass: the constant by which the pressures differ
        geo, e_p = at_gauss_points(s)
        vol_mean += [float(geo["wq"].sum()), float((geo["wq"] * e_p).sum())]
    vol, mean = total(vol_mean)
    mean /= vol
    sq = np.zeros(4)
    for s in blocks:
        geo, e_p = at_gauss_points(s)
        wq = geo["wq"]
        uh = einsum(xp, "qn,eni->eqi", tables.N, vel[cells[s : s + chunk]])
        sq[:3] += backend.to_numpy((wq[..., None] * (uh - velocity(xp, geo["x"])) ** 2).sum(axis=(0, 1)))
        sq[3] += float((wq * (e_p - mean) ** 2).sum())
    return dict(zip("uvwp", np.sqrt(total(sq)).tolist()))


BATCH = 65536  # point-element pairs inverted together by locate (a few tens of MB of geometry)


def locate(mesh, points: np.ndarray, candidates: int = 27, tol: float = 1e-8):
    """Element and reference coordinates of physical points (host arrays).

    points (P, 3). On a whole structured box each point is first tried in the element whose
    vertex coordinates bracket it (HexMesh.box_vertices); the points not found so (all, on
    another mesh) try the ``candidates`` elements with the nearest centres, nearest first
    (HexMesh.centre_tree): the nearest first, then the others at once, BATCH inversions at a
    time (one Newton loop for all of them rather than one per candidate: the DFG case's two
    pressure points, outside a rank's part, took 0.86 s so). The geometry map is inverted by
    Newton's method and the nearest element whose reference coordinates lie in
    [-1 - tol, 1 + tol]^3 is taken. A refined mesh whose arrays are not made
    (fem3d.discretisation.refine.Refined) locates the points in its parents.
    Returns elem (P,) int (-1 where the point is outside the mesh) and xi (P, 3).
    """
    from .refine import Refined

    points = np.atleast_2d(np.asarray(points, dtype=float))
    if isinstance(mesh, Refined) and not mesh.built:  # in the parents: each child's map is a part of its parent's
        return mesh.children_at(*locate(mesh.coarser, points, candidates, tol))
    elem = np.full(len(points), -1, dtype=np.int64)
    xi_found = np.zeros((len(points), 3))

    def attempt(
        todo, cand
    ):  # the points ``todo`` tried in their elements ``cand`` (m, j) at once, the first holding each taken
        j = cand.shape[1]
        rows = max(1, BATCH // max(j, 1))
        for s in range(0, len(todo) if j else 0, rows):
            part, tried = todo[s : s + rows], cand[s : s + rows]
            xi = _reference(mesh, np.repeat(points[part], j, axis=0), tried.ravel()).reshape(len(part), j, 3)
            inside = (np.abs(xi) <= 1 + tol).all(axis=2)
            hit, first = inside.any(axis=1), np.argmax(inside, axis=1)
            elem[part[hit]] = tried[hit, first[hit]]
            xi_found[part[hit]] = xi[hit, first[hit]]

    box = mesh.box_vertices
    if box is not None and len(points):
        layers = [np.clip(np.searchsorted(v, points[:, d], side="right") - 1, 0, len(v) - 2) for d, v in enumerate(box)]
        nx, ny, _ = mesh.grid
        attempt(np.arange(len(points)), mesh.elements_with_ids(layers[0] + nx * (layers[1] + ny * layers[2]))[:, None])
    if (elem < 0).any():
        k = min(candidates, mesh.n_elements)
        _, cand = mesh.centre_tree.query(points, k=k)
        cand = cand.reshape(len(points), k)
        attempt(np.flatnonzero(elem < 0), cand[elem < 0, :1])  # most points lie in the element of the nearest centre
        attempt(np.flatnonzero(elem < 0), cand[elem < 0, 1:])  # the others: their other candidates at once
    return elem, np.clip(xi_found, -1.0, 1.0)


def _reference(mesh, points, elements):
    """(m, 3) reference coordinates of ``points`` (m, 3) under the geometry maps of
    ``elements`` (m,) by Newton's method (clipped to [-2, 2]: far outside is outside)."""
    from .element import Q1, Q2

    X = mesh.geometry_of(elements)  # (m, g, 3)
    geo = Q1 if X.shape[1] == 8 else Q2
    xi = np.zeros((len(elements), 3))
    for _ in range(30):
        G, dG = geo.values(xi), geo.gradients(xi)  # (m, g), (m, g, 3)
        r = points - einsum(np, "mg,mgi->mi", G, X)
        J = einsum(np, "mgi,mgk->mik", X, dG)
        step = np.linalg.solve(J, r[..., None])[..., 0]
        xi += step
        np.clip(xi, -2.0, 2.0, out=xi)
        if np.abs(step).max() < 1e-13:
            break
    return xi


def evaluate(mesh, x: np.ndarray, elem: np.ndarray, xi: np.ndarray):
    """Velocity (P, 3) and pressure (P,) of the host vector ``x`` at located points
    (see :func:`locate`); NaN where elem is -1."""
    from .element import Q1, Q2

    e = np.maximum(elem, 0)
    nodes, n = mesh.cells_of(e), mesh.n_nodes
    u = einsum(np, "pn,pni->pi", Q2.values(xi), np.stack([x[nodes + d * n] for d in range(3)], axis=-1))
    p = split(x, n)[3]
    pr = einsum(np, "pl,pl->p", Q1.values(xi), p[mesh.pressure_cells_of(e)])
    u[elem < 0] = np.nan
    pr[elem < 0] = np.nan
    return u, pr


def nodal_fields(mesh, x: np.ndarray, chunk: int = 4096, node_sum=None) -> dict:
    """Point fields at the Q2 nodes for output (host arrays).

    Returns velocity (n, 3), pressure (n,) (the Q1 field at every Q2 node), speed (n,)
    and vorticity (n, 3) (curl of the velocity, averaged over the elements sharing a node).
    On one rank's part of a distributed mesh, ``node_sum(a)`` completes the per-node
    sums ``a`` (n, k) over the ranks, so that interface nodes average all their elements.
    """
    from .element import Q1, Q2
    from .geometry import det_and_inverse, geometry_element, jacobians

    vel = nodal_velocity(np, x, mesh.n_nodes)
    p = split(x, mesh.n_nodes)[3]
    pressure = np.empty(mesh.n_nodes)
    pressure[mesh.cells] = p[mesh.pressure_cells] @ Q1.values(Q2.nodes).T
    dN = Q2.gradients(Q2.nodes).transpose(0, 2, 1).reshape(-1, 27)  # (27 nodes x 3 axes, 27 functions)
    dG = geometry_element(mesh.geometry.shape[1]).gradients(Q2.nodes)
    curl_sum = np.zeros((mesh.n_nodes, 3))
    for s in range(0, mesh.n_elements, chunk):
        cells = mesh.cells[s : s + chunk]
        _, Jinv = det_and_inverse(np, jacobians(np, mesh.geometry[s : s + chunk], dG))
        reference = (dN @ vel[cells]).reshape(len(cells), 27, 3, 3)  # d u_c / d xi_k at node t: [e, t, k, c]
        grad = np.matmul(reference.transpose(0, 1, 3, 2), Jinv)  # d u_c / d x_i: [e, t, c, i]
        curl = np.stack(
            [grad[..., 2, 1] - grad[..., 1, 2], grad[..., 0, 2] - grad[..., 2, 0], grad[..., 1, 0] - grad[..., 0, 1]],
            axis=-1,
        )
        for d in range(3):
            curl_sum[:, d] += np.bincount(cells.ravel(), weights=curl[..., d].ravel(), minlength=mesh.n_nodes)
    sums = np.concatenate([curl_sum, mesh.node_valence()[:, None].astype(np.float64)], axis=1)
    if node_sum is not None:
        sums = node_sum(sums)
    vorticity = sums[:, :3] / sums[:, 3:]
    return {"velocity": vel, "pressure": pressure, "speed": np.linalg.norm(vel, axis=1), "vorticity": vorticity}


def centre_line(mesh, x: np.ndarray, axis: int, points: int, extra_coords=()) -> dict:
    """Velocity and pressure of the host vector ``x`` along the line parallel to ``axis``
    (0, 1, 2) through the centre of the mesh's bounding box, at ``points`` uniform
    coordinates plus ``extra_coords`` (clipped to the box), sorted and without repeats.

    Returns coords (m,), points (m, 3), velocity (m, 3) and pressure (m,); NaN at points
    outside the mesh.
    """
    lo, hi = mesh.bounds()
    coords = np.linspace(lo[axis], hi[axis], points)
    coords = np.unique(np.concatenate([coords, np.clip(np.asarray(extra_coords, dtype=float), lo[axis], hi[axis])]))
    pts = np.tile(0.5 * (lo + hi), (len(coords), 1))
    pts[:, axis] = coords
    velocity, pressure = evaluate(mesh, x, *locate(mesh, pts))
    return {"coords": coords, "points": pts, "velocity": velocity, "pressure": pressure}


def mid_plane(mesh, x: np.ndarray, samples=121) -> dict:
    """Velocity of the host vector ``x`` on a uniform grid of ``samples`` points per side
    (or (m, k) along x and y) over the bounding box of the mesh in the plane z = its centre.

    Returns x (m,), y (k,), z (float) and velocity (k, m, 3) with velocity[j, i] at
    (x[i], y[j], z); NaN at points outside the mesh.
    """
    m, k = (samples, samples) if np.ndim(samples) == 0 else samples
    lo, hi = mesh.bounds()
    xs, ys, z = np.linspace(lo[0], hi[0], m), np.linspace(lo[1], hi[1], k), 0.5 * (lo[2] + hi[2])
    gx, gy = np.meshgrid(xs, ys)
    pts = np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, z)], axis=1)
    velocity, _ = evaluate(mesh, x, *locate(mesh, pts))
    return {"x": xs, "y": ys, "z": float(z), "velocity": velocity.reshape(k, m, 3)}
