"""Quantities of interest of a solved flow: forces on tagged boundaries, values at points,
and fluxes (volume per time) through tagged boundaries and planes x, y or z = const.

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

Fluxes integrate u . n by Gauss rules on the surfaces (fem3d.discretisation.surfaces):
exact for the Q2 velocity on boundary faces, and on cuts of box elements; through a
tagged boundary n is the outward normal (an outflow counts positive, an inflow negative),
through a plane x_axis = c it is +e_axis.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from gpucfd.errors import InputError, cut, first_few, shown
from .boundary import Velocity, condition_from_spec
from ..discretisation.fields import evaluate, locate
from ..discretisation.surfaces import face_rule, plane_rule

LOCATED_SETS = 16  # point sets a mesh remembers the location of (HexMesh.located), the oldest dropped first


def boundary_force(system, x, tags) -> np.ndarray:
    """(3,) force of the fluid on the boundary faces tagged ``tags`` (names), from the
    complete local vector ``x`` of a NavierStokesSystem; the same on every rank."""
    index, weights = body_unknowns(system, tags)
    residual = system.equation_residual(system.backend.asarray(x))
    force = -(residual[index] * weights).reshape(3, -1).sum(axis=1)
    return system.backend.to_numpy(system.dist.allreduce(force))


def body_unknowns(system, tags) -> tuple:
    """(index (3 m,), weights (3 m,)) device arrays: the velocity unknowns of the m nodes of
    this rank's part on the faces tagged ``tags`` (also where only another rank has the
    face), u's then v's then w's, and 1 where this rank owns the unknown, else 0; found once
    per system and tag set (``system.bodies``)."""
    mesh, backend, dist = system.mesh, system.backend, system.dist
    key = tuple(sorted(set(mesh.tag_ids(tags).tolist())))
    if key not in system.bodies:
        xp, n = backend.xp, mesh.n_nodes
        on_body = np.zeros(mesh.n_dofs)
        on_body[mesh.boundary_nodes(key)] = 1.0
        nodes = xp.flatnonzero(dist.sum_interface(backend.asarray(on_body))[:n] > 0)
        index = xp.concatenate([nodes + d * n for d in range(3)])
        system.bodies[key] = (index, dist.owned_part(xp.ones(mesh.n_dofs))[index])
    return system.bodies[key]


def point_values(mesh, x: np.ndarray, points, comm=None) -> tuple[np.ndarray, np.ndarray]:
    """Velocity (P, 3) and pressure (P,) of the complete local host vector ``x`` on
    ``mesh`` (this rank's part) at physical points (P, 3), the same on every rank of
    ``comm``; NaN where no rank's part holds a point. The points are located once per
    mesh (HexMesh.located, at most LOCATED_SETS sets)."""
    points = np.atleast_2d(np.asarray(points, dtype=np.float64))
    key = points.tobytes()
    if key not in mesh.located:
        if len(mesh.located) >= LOCATED_SETS:
            del mesh.located[next(iter(mesh.located))]
        mesh.located[key] = locate(mesh, points)
    elem, xi = mesh.located[key]
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


@dataclass(frozen=True)
class Plane:
    """The plane x_axis = value (axis 0, 1, 2: x, y, z)."""

    axis: int
    value: float

    def __str__(self) -> str:
        return f"{'xyz'[self.axis]}={self.value:g}"


PLANE = re.compile(r"\s*([xyz])\s*=\s*(\S+)\s*")


def parse_plane(text) -> Plane | None:
    """The plane spelled "x=VALUE" (or y, z; VALUE a finite number, spaces allowed), else None."""
    match = PLANE.fullmatch(text) if isinstance(text, str) else None
    try:
        value = float(match.group(2)) if match else math.nan
    except ValueError:
        return None
    return Plane("xyz".index(match.group(1)), value) if math.isfinite(value) else None


def flux_target(through, mesh, where: str = "through"):
    """What ``through`` names on ``mesh`` (this rank's part or the whole): a boundary tag
    (returned as it is) or a plane "x=VALUE" (y, z) that meets the mesh (a Plane);
    InputError naming ``where`` (the user's spelling: "[report] fluxes.mid") otherwise."""
    if isinstance(through, str) and through in mesh.tag_names:
        return through
    plane = parse_plane(through)
    if plane is None:
        raise InputError(
            f"{where} must name a boundary tag ({first_few(sorted(mesh.tag_names), 8, cut) or 'none'}) or a "
            f'plane "x=VALUE", "y=VALUE" or "z=VALUE" (got {shown(through)})'
        )
    lo, hi = (mesh.whole or mesh).bounds()
    a = plane.axis
    if not lo[a] <= plane.value <= hi[a]:
        raise InputError(f"{where}: the plane {plane} misses the mesh ({'xyz'[a]} from {lo[a]:g} to {hi[a]:g})")
    return plane


def flux(mesh, x: np.ndarray, through, comm=None, where: str = "through") -> float:
    """Flux of the velocity of the complete local host vector ``x`` (on ``mesh``, this rank's
    part) through ``through``: a boundary tag (outward) or a plane "x=VALUE" (toward +x; y,
    z alike; :func:`flux_target`); the same on every rank of ``comm`` (collective)."""
    target = flux_target(through, mesh, where)
    if isinstance(target, Plane):
        return plane_flux(mesh, x, target.axis, target.value, comm)
    return boundary_flux(mesh, x, [target], comm)


def fluxes(mesh, x: np.ndarray, targets: dict, comm=None, where: str = "[report] fluxes") -> dict:
    """{name: :func:`flux` through targets[name]} (collective)."""
    return {name: flux(mesh, x, through, comm, f"{where}.{name}") for name, through in targets.items()}


def boundary_flux(mesh, x: np.ndarray, tags, comm=None) -> float:
    """Integral of u . n over the boundary faces tagged ``tags`` (names), n the outward
    normal, of the complete local host vector ``x`` on ``mesh`` (this rank's part: each
    face belongs to one rank's element); the same on every rank of ``comm`` (collective)."""
    faces = mesh.boundary_faces[np.isin(mesh.boundary_tags, mesh.tag_ids(tags))]
    elements, xi, _, area = face_rule(mesh, faces)
    velocity = evaluate(mesh, x, elements.ravel(), xi.reshape(-1, 3))[0]
    return _total(float((velocity * area.reshape(-1, 3)).sum()), comm)


def plane_flux(mesh, x: np.ndarray, axis: int, value: float, comm=None) -> float:
    """Integral of u_axis over the cut of the plane x_axis = ``value`` through ``mesh`` (this
    rank's part) of the complete local host vector ``x``; the same on every rank of ``comm``
    (collective)."""
    elements, xi, weights = plane_rule(mesh, axis, value)
    velocity = evaluate(mesh, x, elements, xi)[0]
    return _total(float(weights @ velocity[:, axis]), comm)


def flow_rates(problem, conditions: dict, comm=None, t: float = 0.0) -> dict:
    """{tag: {"nominal": Q, "delivered": Q_h}} for each Velocity condition of ``conditions``
    {tag: condition or case-file spelling} of the FlowProblem ``problem`` (on this rank's
    part: NavierStokesSystem.problem), outward fluxes as :func:`boundary_flux` (an inflow is
    negative): Q of the prescribed velocity (its expressions at the Gauss points of the tag's
    faces), Q_h of the boundary values the discrete problem imposes, which are zero at the
    nodes that walls took (a plug inflow into a duct of n x n elements delivers
    (1 - 1/(3 n))^2 of its nominal rate), both at the time ``t``. The same on every rank of
    ``comm`` (collective)."""
    mesh = problem.mesh
    n = mesh.n_nodes
    imposed = np.zeros(mesh.n_dofs)
    values = problem.values_at(t)
    for d in range(3):
        held = problem.bc_mask[:, d]
        imposed[d * n + problem.bc_nodes[held]] = values[held, d]
    out = {}
    for tag, spec in conditions.items():
        condition = condition_from_spec(tag, spec)
        if not isinstance(condition, Velocity):
            continue
        faces = mesh.boundary_faces[mesh.boundary_tags == mesh.tag_names[tag]]
        _, _, points, area = face_rule(mesh, faces)
        nominal = float((condition.values(points.reshape(-1, 3), t) * area.reshape(-1, 3)).sum())
        out[tag] = {"nominal": _total(nominal, comm), "delivered": boundary_flux(mesh, imposed, [tag], comm)}
    return out


def _total(value: float, comm) -> float:
    """``value`` summed over the ranks of ``comm`` (None: one process)."""
    return value if comm is None else comm.allreduce_scalar(value)
