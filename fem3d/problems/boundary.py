"""Boundary conditions by boundary tag, and the prescribed velocity components they give.

Conditions (one per tag; every boundary face must get exactly one):

``Wall()``            no slip: u = v = w = 0.
``Velocity(u, v, w)`` prescribed velocity; each component a number or an expression in
                      x, y, z and the time t (fem3d.problems.expressions), e.g. the
                      parabolic inflow profile.
``Outflow()``         the natural ("do-nothing") condition of the discrete equations,
                      nu du/dn - p n = 0 (the viscous term is nu grad u : grad v and the
                      pressure term -p div v): nothing is prescribed; the pressure level
                      is then fixed by the outflow.
``Slip()``            symmetry plane: zero normal velocity, zero tangential viscous
                      traction (natural); faces must lie in planes x, y or z = constant.

Where faces of different conditions meet, a node takes the strongest: a wall's zero, then
prescribed velocities (in the order given), then the slip planes' normal components (a
node on two slip planes keeps both at zero); outflow prescribes nothing. A flow without
outflow is enclosed: its pressure is defined up to a constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucfd.sets import distinct
from gpucfd.errors import InputError, cut, first_few, shown
from .expressions import Expression
from gpucfd.backend import einsum
from ..discretisation.element import Q2
from ..discretisation.surfaces import face_points, face_rule
from ..discretisation.mesh import point_text

PLANE_TOL = 1e-9  # a slip face lies in a plane when its nodes' spread is below this times the mesh size


@dataclass(frozen=True)
class Wall:
    """No slip."""


@dataclass(frozen=True)
class Outflow:
    """Do-nothing outflow."""


@dataclass(frozen=True)
class Slip:
    """Zero normal velocity on an axis-aligned plane."""


class Velocity:
    """Prescribed velocity (u, v, w): numbers or expression texts in x, y, z and t."""

    def __init__(self, u, v=0.0, w=0.0, *, where: str = "velocity"):
        self.components = tuple(Expression(c, f"{where} {name}") for c, name in zip((u, v, w), "uvw"))
        self.in_time = any(c.in_time for c in self.components)
        self.where = where

    def values(self, points: np.ndarray, t: float = 0.0) -> np.ndarray:
        """(n, 3) velocity at host points (n, 3) at time t."""
        return np.stack([c(np, points, t) for c in self.components], axis=1)

    def __repr__(self) -> str:
        return f"Velocity({', '.join(c.text for c in self.components)})"


CONDITIONS = ("wall", "velocity", "outflow", "slip")


def condition_from_spec(name: str, spec):
    """The condition of boundary ``name`` from a case-file value: "wall", "outflow",
    "slip" or {velocity = [u, v, w]} (numbers or expression texts)."""
    where = f'boundary "{cut(name)}"'
    if isinstance(spec, (Wall, Outflow, Slip, Velocity)):
        return spec
    if isinstance(spec, str) and spec in ("wall", "outflow", "slip"):
        return {"wall": Wall, "outflow": Outflow, "slip": Slip}[spec]()
    if isinstance(spec, dict) and list(spec) == ["velocity"]:
        value = spec["velocity"]
        if not isinstance(value, (list, tuple)) or len(value) != 3:
            raise InputError(
                f"{where}: velocity must be a list of 3 numbers or expressions [u, v, w] (got {shown(value)})"
            )
        return Velocity(*value, where=f"{where} velocity")
    raise InputError(
        f'{where}: the condition must be one of "wall", "outflow", "slip" or {{velocity = [u, v, w]}} '
        f"(got {shown(spec)})"
    )


@dataclass
class Constraints:
    """Prescribed velocity components at the Q2 nodes of a mesh.

    nodes (n_b,) sorted node ids with at least one prescribed component; values (n_b, 3)
    the prescribed values at t = 0 (0 where not prescribed); mask (n_b, 3) bool, True where a
    component is prescribed; enclosed: no outflow (the pressure level is free); timed: the
    velocities that change in time, [(rows of ``nodes``, their points (m, 3), Velocity)].
    """

    nodes: np.ndarray
    values: np.ndarray
    mask: np.ndarray
    enclosed: bool
    timed: list = field(default_factory=list)

    def values_at(self, t: float) -> np.ndarray:
        """(n_b, 3) the prescribed values at time t; InputError where one is not finite."""
        values = self.values.copy()
        for rows, points, condition in self.timed:
            v = condition.values(points, t)
            bad = ~np.isfinite(v).all(axis=1)
            if bad.any():
                raise InputError(
                    f"{condition.where} {shown(condition)} is not finite at {point_text(points[bad][0])} at t = {t:.9g}"
                )
            values[rows] = v
        return values


def constraints_by_tag(mesh, conditions: dict) -> Constraints:
    """The constraints of ``conditions`` {tag name: condition or case-file spec}: each
    boundary face of ``mesh`` must carry a tag with exactly one condition, and each tag
    named must carry faces."""
    if not isinstance(conditions, dict):
        raise InputError(f"boundary: the conditions must be a dict {{tag name: condition}} (got {shown(conditions)})")
    if not conditions:
        raise InputError("boundary: no boundary conditions given (give one of wall, velocity, outflow, slip per tag)")
    not_names = [t for t in conditions if not isinstance(t, str)]
    if not_names:
        raise InputError(f"boundary: tag names must be strings (got {first_few(not_names)})")
    check_tags(mesh, "boundary", conditions)
    untagged = np.flatnonzero(mesh.boundary_tags < 0)
    if untagged.size:
        raise InputError(
            f"boundary: {untagged.size} boundary face(s) carry no tag, the first at "
            f"{_face_centre(mesh, untagged[0])}; tag every boundary face in the mesh file"
        )
    given = {mesh.tag_names[t] for t in conditions}
    present = set(np.unique(mesh.boundary_tags).tolist())
    missing = sorted(name for name, t in mesh.tag_names.items() if t not in given and t in present)
    if missing:
        raise InputError(
            f"boundary: faces tagged {first_few(missing)} have no condition (give each one of {', '.join(CONDITIONS)})"
        )
    groups = [
        (name, mesh.boundary_tags == mesh.tag_names[name], condition_from_spec(name, spec))
        for name, spec in conditions.items()
    ]
    return constraints(mesh, groups)


def check_tags(mesh, where: str, tags) -> None:
    """InputError naming ``where`` (e.g. "boundary", "[report] forces") unless every name of
    ``tags`` is a tag of ``mesh`` that some boundary face carries."""
    unknown = [t for t in tags if t not in mesh.tag_names]
    if unknown:
        raise InputError(
            f"{where}: tag(s) {first_few(unknown)} not in the mesh (its tags: "
            f"{first_few(sorted(mesh.tag_names), 8, cut) or 'none'})"
        )
    present = set(np.unique(mesh.boundary_tags).tolist())
    empty = [t for t in tags if mesh.tag_names[t] not in present]
    if empty:
        raise InputError(f"{where}: no boundary face carries the tag(s) {first_few(empty)}")


def constraints(mesh, groups: list) -> Constraints:
    """The constraints of ``groups`` [(name, face mask over mesh.boundary_faces, condition)]
    covering every boundary face once (checked by the caller), strongest first (module
    docstring)."""
    rank = {Wall: 0, Velocity: 1, Slip: 2, Outflow: 3}
    faces = mesh.boundary_faces
    boundary = distinct(mesh.face_nodes_of(faces))  # every boundary node, sorted
    value = np.zeros((len(boundary), 3))  # by row of ``boundary``: no array over all the mesh's nodes
    mask = np.zeros((len(boundary), 3), dtype=bool)
    timed = []  # (rows, Velocity) of the velocities in t
    for name, sel, condition in sorted(groups, key=lambda g: rank[type(g[2])]):
        face_nodes = mesh.face_nodes_of(faces[sel])  # (F, 9)
        if isinstance(condition, Outflow):
            continue
        if isinstance(condition, Slip):
            nodes, component = _slip_components(mesh, name, face_nodes)
            rows = np.searchsorted(boundary, nodes)
            free = ~mask[rows, component]
            mask[rows[free], component[free]] = True
            continue
        rows = np.searchsorted(boundary, distinct(face_nodes))
        free = rows[~mask[rows].any(axis=1)]
        if isinstance(condition, Velocity):
            v = condition.values(mesh.points_of(boundary[free]))
            bad = ~np.isfinite(v).all(axis=1)
            if bad.any():
                raise InputError(
                    f'boundary "{cut(name)}": the velocity {shown(condition)} is not finite at '
                    f"{point_text(mesh.points_of(boundary[free[bad][0]]))}"
                )
            value[free] = v
            if condition.in_time:
                timed.append((free, condition))
        mask[free] = True
    kept = np.flatnonzero(mask[:, 0] | mask[:, 1] | mask[:, 2])  # 10 times faster than mask.any(axis=1)
    enclosed = not any(isinstance(c, Outflow) and sel.any() for _, sel, c in groups)
    timed = [(np.searchsorted(kept, free), mesh.points_of(boundary[free]), c) for free, c in timed]
    return Constraints(boundary[kept], value[kept], mask[kept], enclosed, timed)


def outflow_and_inflow(mesh, nodes: np.ndarray, velocity: np.ndarray) -> tuple[float, float, float]:
    """(outflow, inflow, size) of the Q2 field with nodal values ``velocity`` (k, 3) at the
    sorted Q2 nodes ``nodes`` (k,) and zero at the others, through the boundary of ``mesh``:
    the integrals of u . n (n the outer normal) over the boundary faces where it is positive
    and where it is negative (as a positive number), and of |u|, by the faces' Gauss rule
    (fem3d.discretisation.surfaces.face_rule); faces where u = 0 are skipped. No array over
    all the mesh's nodes is made."""
    if not len(nodes):
        return 0.0, 0.0, 0.0

    def at(ids):  # the field at the nodes ``ids`` (any shape): (..., 3)
        rows = np.minimum(np.searchsorted(nodes, ids), len(nodes) - 1)
        return np.where((nodes[rows] == ids)[..., None], velocity[rows], 0.0)

    faces = mesh.boundary_faces
    moving = faces[at(mesh.face_nodes_of(faces)).any(axis=(1, 2))]
    area = face_rule(mesh, moving)[3]
    basis = np.stack([Q2.values(face_points(f)) for f in range(6)])[moving[:, 1]]  # (F, Q, 27) by the face's kind
    u = einsum(np, "fqn,fni->fqi", basis, at(mesh.cells_of(moving[:, 0])))
    flux = (u * area).sum(axis=(1, 2))
    size = (np.linalg.norm(u, axis=2) * np.linalg.norm(area, axis=2)).sum()
    return float(flux[flux > 0].sum()), float(-flux[flux < 0].sum()), float(size)


def _slip_components(mesh, name: str, face_nodes: np.ndarray):
    """(nodes, component) pairs: each slip face's nodes with the axis normal to its plane."""
    xyz = mesh.points_of(face_nodes)  # (F, 9, 3)
    spread = np.ptp(xyz, axis=1)  # (F, 3)
    lo, hi = mesh.bounds()
    tol = PLANE_TOL * float((hi - lo).max())
    axis = np.argmin(spread, axis=1)
    bad = spread[np.arange(len(axis)), axis] > tol
    if bad.any():
        raise InputError(
            f'boundary "{cut(name)}": slip needs faces in planes x, y or z = constant; the face at '
            f"{point_text(xyz[bad][0].mean(axis=0))} is not"
        )
    return face_nodes.ravel(), np.repeat(axis, face_nodes.shape[1])


def _face_centre(mesh, face: int) -> str:
    return point_text(mesh.points_of(mesh.face_nodes_of(mesh.boundary_faces[face]))[0].mean(axis=0))
