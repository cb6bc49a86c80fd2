"""Helpers shared by the tests: small meshes and assembled operators."""
import os

import numpy as np

from fem3d.mesh import box_mesh, read_mesh
from fem3d.navier_stokes import FlowProblem, NavierStokesSystem

MESHES = os.path.join(os.path.dirname(__file__), "..", "meshes")


def sample_mesh(name: str):
    """'box' (3x2x2 graded box), 'distorted' (hex8 file), 'annulus' (hex27 file)."""
    if name == "box":
        return box_mesh(3, 2, 2, lengths=(1.0, 0.7, 1.3), grading=0.8)
    return read_mesh(os.path.join(MESHES, {"distorted": "distorted_cube_hex8.msh", "annulus": "annulus_hex27.msh"}[name]))


def assembled(mesh, backend, re=40.0, seed=0, kind="picard"):
    """The equations on ``mesh`` with element matrices assembled about a random iterate x
    (Picard matrix, or the Jacobian with kind="newton"), Dirichlet rows set.

    Walls: every boundary face, prescribed velocity (1, 0, 0). Returns (system, x, state)."""
    problem = FlowProblem.with_boundary_velocity(mesh, re, lambda x: np.tile([1.0, 0.0, 0.0], (len(x), 1)))
    system = NavierStokesSystem(problem, backend)
    rng = np.random.default_rng(seed)
    x = backend.asarray(rng.standard_normal(mesh.n_dofs))
    return system, x, system.assemble(x, kind)
