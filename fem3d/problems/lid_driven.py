"""The lid-driven cavity as a FlowProblem (boundary conditions by face, fem3d.problems.boundary): the
lid's faces, the boundary velocity, and the initial state of a restart.

The lid moves at ``lid_velocity`` (default unit speed in +x); every other boundary face
is a no-slip wall, and where the lid meets a wall the wall's zero velocity is imposed.
"""

from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError
from .boundary import Velocity, Wall, constraints
from .navier_stokes import FlowProblem

FACE_CORNERS = [0, 2, 6, 8]  # the vertices among a face's 9 Q2 nodes (3 x 3, tensor order)


def lid_faces(mesh, lid: str) -> np.ndarray:
    """Boolean mask over mesh.boundary_faces of the lid: a tag name, or a plane "y=1"
    (faces whose vertices all lie on it, to 1e-9 of the mesh size)."""
    if "=" in lid:
        axis, _, value = lid.partition("=")
        if axis.strip() not in ("x", "y", "z"):
            raise InputError(f"--lid {lid}: the plane must read x=VALUE, y=VALUE or z=VALUE")
        try:
            level = float(value)
        except ValueError:
            raise InputError(f"--lid {lid}: {value!r} is not a number") from None
        d = "xyz".index(axis.strip())
        faces = mesh.boundary_faces
        verts = mesh.points_of(mesh.face_nodes_of(faces)[:, FACE_CORNERS])  # (F, 4, 3) the faces' vertices
        lo, hi = mesh.bounds()
        tol = 1e-9 * float((hi - lo).max())
        mask = np.all(np.abs(verts[..., d] - level) <= tol, axis=1)
    else:
        mask = np.isin(mesh.boundary_tags, mesh.tag_ids([lid]))
    if not mask.any():
        raise InputError(
            f"--lid {lid}: no boundary face of the mesh is on the lid "
            f"(tags: {', '.join(sorted(mesh.tag_names)) or 'none'})"
        )
    return mask


def lid_driven_problem(mesh, re: float, lid: str, lid_velocity=(1.0, 0.0, 0.0)) -> FlowProblem:
    """The cavity as boundary conditions (fem3d.problems.boundary): ``lid_velocity`` on the lid's
    faces, no-slip walls on every other face; where they meet, the wall's zero."""
    mask = lid_faces(mesh, lid)
    groups = [("lid", mask, Velocity(*lid_velocity)), ("walls", ~mask, Wall())]
    return FlowProblem.with_constraints(mesh, re, constraints(mesh, groups))


def read_initial(path: str, n_dofs: int) -> np.ndarray:
    """The solution vector (n_dofs,) [u | v | w | p] that an earlier run saved as solution.npy."""
    try:
        x = np.load(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"--initial {path}: cannot read a .npy solution ({exc})") from None
    if x.shape != (n_dofs,) or not np.issubdtype(x.dtype, np.floating) or not np.all(np.isfinite(x)):
        raise InputError(
            f"--initial {path}: expected {n_dofs} finite values for this mesh, got an array of shape {x.shape}"
        )
    return x.astype(np.float64)
