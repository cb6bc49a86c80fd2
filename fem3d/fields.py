"""Finite element fields on a HexMesh: splitting the unknown vector, values at Gauss
points, and L2 norms of errors against exact solutions.

Global vector layout: [u (n_nodes) | v (n_nodes) | w (n_nodes) | p (n_pressure)].
"""
from __future__ import annotations

import math

import numpy as np

from .assembly import ReferenceTables, quadrature_geometry


def split(x, n_nodes: int):
    """Views (u, v, w, p) of the global vector ``x``."""
    return x[:n_nodes], x[n_nodes:2 * n_nodes], x[2 * n_nodes:3 * n_nodes], x[3 * n_nodes:]


def nodal_velocity(xp, x, n_nodes: int):
    """(n_nodes, 3) velocity at the Q2 nodes."""
    u, v, w, _ = split(x, n_nodes)
    return xp.stack([u, v, w], axis=1)


def pressure_weights(backend, mesh, chunk: int = 8192):
    """(n_pressure,) integrals of the pressure basis functions, sum = domain volume."""
    xp = backend.xp
    tables = ReferenceTables.build(xp, mesh.geometry.shape[1])
    m = xp.zeros(mesh.n_pressure, dtype=np.float64)
    pc = backend.asarray(mesh.pressure_cells)
    for s in range(0, mesh.n_elements, chunk):
        wq = quadrature_geometry(xp, backend.asarray(mesh.geometry[s:s + chunk]), tables)["wq"]
        m += xp.bincount(pc[s:s + chunk].ravel(), weights=(wq @ tables.M).ravel(), minlength=mesh.n_pressure)
    return m


def l2_errors(backend, mesh, x, velocity, pressure, n_gauss: int = 4, chunk: int = 4096) -> dict:
    """L2 norms of u_h - u, v_h - v, w_h - w and p_h - p (pressures compared up to a constant).

    velocity(xp, pts) -> (..., 3) and pressure(xp, pts) -> (...) exact solutions at
    physical points (..., 3); ``x`` is the global vector on ``backend``.
    Returns dict with keys u, v, w, p.
    """
    xp = backend.xp
    tables = ReferenceTables.build(xp, mesh.geometry.shape[1], n_gauss)
    vel = nodal_velocity(xp, x, mesh.n_nodes)
    p_nodes = split(x, mesh.n_nodes)[3]
    cells = backend.asarray(mesh.cells)
    pcells = backend.asarray(mesh.pressure_cells)
    blocks = range(0, mesh.n_elements, chunk)

    def at_gauss_points(s):
        geo = quadrature_geometry(xp, backend.asarray(mesh.geometry[s:s + chunk]), tables)
        e_p = p_nodes[pcells[s:s + chunk]] @ tables.M.T - pressure(xp, geo["x"])
        return geo, e_p

    vol = mean = 0.0
    for s in blocks:  # first pass: the constant by which the pressures differ
        geo, e_p = at_gauss_points(s)
        vol += float(geo["wq"].sum())
        mean += float((geo["wq"] * e_p).sum())
    mean /= vol
    sq = np.zeros(4)
    for s in blocks:
        geo, e_p = at_gauss_points(s)
        wq = geo["wq"]
        uh = xp.einsum("qn,eni->eqi", tables.N, vel[cells[s:s + chunk]])
        sq[:3] += backend.to_numpy((wq[..., None] * (uh - velocity(xp, geo["x"])) ** 2).sum(axis=(0, 1)))
        sq[3] += float((wq * (e_p - mean) ** 2).sum())
    return dict(zip("uvwp", np.sqrt(sq).tolist()))
