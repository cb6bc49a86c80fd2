"""Quantities of interest of a solved flow: forces on tagged boundaries and values at points.

Force by the volume (residual) integral (John 2004; Braack & Richter 2006): with the
discrete residual F(x) of the equations tested with a velocity test function v that is
the unit vector e_d at every node of the body's faces and zero at all other nodes,

    F_d = -F(x; v) = -sum over the body's nodes k of F(x)[d-block row k],

which by integration by parts equals the surface integral of the traction
(nu du/dn - p n) . e_d over the body (n the fluid's outer normal, pointing into the
body), minus a thin strip of neighbouring boundary where v falls to zero. It is the
force that the fluid exerts on the body, consistent with the discrete equations, and
converges faster than a surface integral of the stresses. Units: those of the
equations (density 1, viscosity nu = 1/Re).
"""

from __future__ import annotations

import numpy as np

from gpucfd.sets import distinct
from ..discretisation.fields import evaluate, locate
from ..discretisation.mesh import Q2_FACE_NODES


def boundary_force(system, x, tags) -> np.ndarray:
    """(3,) force of the fluid on the boundary faces tagged ``tags`` (names), from the
    complete local vector ``x`` (device) of a NavierStokesSystem; the same on every rank."""
    mesh, backend, dist = system.mesh, system.backend, system.dist
    faces = mesh.boundary_faces[np.isin(mesh.boundary_tags, mesh.tag_ids(tags))]
    on_body = np.zeros(mesh.n_dofs)
    on_body[distinct(mesh.cells[faces[:, 0][:, None], Q2_FACE_NODES[faces[:, 1]]])] = 1.0
    on_body = dist.sum_interface(backend.asarray(on_body)) > 0  # also where only another rank has the face
    residual = system.equation_residual(backend.asarray(x))
    n = mesh.n_nodes
    force = np.empty(3)
    for d in range(3):
        test = backend.xp.zeros(mesh.n_dofs, dtype=np.float64)
        test[d * n : (d + 1) * n] = on_body[:n]
        force[d] = -dist.dot(test, residual)
    return force


def point_values(mesh, x: np.ndarray, points, comm=None) -> tuple[np.ndarray, np.ndarray]:
    """Velocity (P, 3) and pressure (P,) of the complete local host vector ``x`` on
    ``mesh`` (this rank's part) at physical points (P, 3), the same on every rank of
    ``comm``; NaN where no rank's part holds a point."""
    points = np.atleast_2d(np.asarray(points, dtype=np.float64))
    elem, xi = locate(mesh, points)
    velocity, pressure = evaluate(mesh, x, elem, xi)
    found = elem >= 0
    sums = np.concatenate(
        [
            np.where(found[:, None], velocity, 0.0),
            np.where(found, pressure, 0.0)[:, None],
            found[:, None].astype(np.float64),
        ],
        axis=1,
    )
    if comm is not None and comm.size > 1:
        sums = comm.allreduce(sums)
    count = sums[:, 4]
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(count[:, None] > 0, sums[:, :4] / count[:, None], np.nan)
    return values[:, :3], values[:, 3]
