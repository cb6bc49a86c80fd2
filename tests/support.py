"""Helpers shared by the tests: small meshes and assembled operators."""

import itertools
import os

import meshio
import numpy as np

from fem3d.discretisation.element import Q2
from fem3d.discretisation.mesh import TENSOR27_TO_VTK, VTK_HEX8_TO_TENSOR, box_mesh, mesh_from_hex8, read_mesh
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem

MESHES = os.path.join(os.path.dirname(__file__), "..", "meshes")
DFG_CASE_TEXT = f"""[mesh]
file = "{os.path.abspath(os.path.join(MESHES, "dfg3d", "channel_coarse.msh"))}"
[fluid]
nu = 1e-3
[boundary]
inflow = {{ velocity = ["y*(0.41-y)", 0, 0] }}
walls = "wall"
cylinder = "wall"
outflow = "outflow"
"""  # a case file of the coarse DFG channel
ANNULUS_CASE_TEXT = f"""[mesh]
file = "{os.path.abspath(os.path.join(MESHES, "annulus_hex27.msh"))}"
[fluid]
re = 20
[boundary]
inner = {{ velocity = ["-y", "x", 0] }}
outer = "wall"
ends = "wall"
"""  # a case file of the annulus (64 elements) between a turning inner cylinder and a wall


def case_file(tmp_path, text: str, name: str = "case.toml") -> str:
    """Write the case file ``text`` into the folder ``tmp_path`` (a pathlib.Path); its path."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def sample_mesh(name: str):
    """'box' (3x2x2 graded box), 'distorted' (hex8 file), 'annulus' (hex27 file)."""
    if name == "box":
        return box_mesh(3, 2, 2, lengths=(1.0, 0.7, 1.3), grading=0.8)
    return read_mesh(
        os.path.join(MESHES, {"distorted": "distorted_cube_hex8.msh", "annulus": "annulus_hex27.msh"}[name])
    )


def twisted_mesh(n: int = 2, seed: int = 0, jitter: float = 0.15, grid=None, lengths=(1.0, 1.0, 1.0), grading=0.0):
    """Hex8 mesh of the unit cube (or a box of sides ``lengths``, its layers graded toward the
    walls by ``grading``: fem3d.discretisation.mesh.box_mesh), n^3 elements (or ``grid`` (nx,
    ny, nz)) with the interior vertices moved by up to ``jitter`` element sides and each
    element's vertices listed in a random rotation of its reference cube, so that neighbours
    meet in many relative orientations (unlike the sample files)."""
    grid = (n, n, n) if grid is None else grid
    box = box_mesh(*grid, lengths=lengths, grading=grading)
    rng = np.random.default_rng(seed)
    verts = box.points[box.pressure_nodes].copy()
    interior = np.all((verts > 0) & (verts < np.array(lengths)), axis=1)
    verts[interior] += rng.uniform(-jitter, jitter, (interior.sum(), 3)) * np.array(lengths) / np.array(grid)
    corner = np.array([[a, b, c] for c in (0, 1) for b in (0, 1) for a in (0, 1)])  # tensor order
    rotations = []
    for perm in itertools.permutations(range(3)):
        for flip in itertools.product((0, 1), repeat=3):
            sign = np.linalg.det(np.eye(3)[list(perm)]) * (-1) ** sum(flip)
            if sign > 0:
                w = corner[:, list(perm)] ^ np.array(flip)
                rotations.append(w[:, 0] + 2 * w[:, 1] + 4 * w[:, 2])
    rotations = np.array(rotations)  # (24, 8): local vertex t of the rotated element is vertex rotations[r, t]
    tensor = np.take_along_axis(box.pressure_cells, rotations[rng.integers(0, 24, box.n_elements)], axis=1)
    return mesh_from_hex8(verts, tensor[:, np.argsort(VTK_HEX8_TO_TENSOR)])


def curved_hex27(path: str) -> str:
    """Write a one-element hex27 mesh to ``path``: det J >= 0.005 on the 5x5x5 reference lattice
    (fem3d.discretisation.geometry.SAMPLES) but with the centre node 4 of its face zeta = -1
    pushed in so far that det J < 0 near (-1/4, -1/4, -1): the element folds between those
    samples (a child of it would be inverted)."""
    X = (Q2.nodes + 1) / 2
    X[4] += (-0.12, -0.12, 0.32)
    meshio.write(path, meshio.Mesh(X[TENSOR27_TO_VTK], [("hexahedron27", np.arange(27)[None])]))
    return path


def assembled(mesh, backend, re=40.0, seed=0, kind="picard"):
    """The equations on ``mesh`` with element matrices assembled about a random iterate x
    (Picard matrix, or the Jacobian with kind="newton"), Dirichlet rows set.

    Walls: every boundary face, prescribed velocity (1, 0, 0). Returns (system, x, state)."""
    problem = FlowProblem.with_boundary_velocity(mesh, re, lambda x: np.tile([1.0, 0.0, 0.0], (len(x), 1)))
    system = NavierStokesSystem(problem, backend)
    rng = np.random.default_rng(seed)
    x = backend.asarray(rng.standard_normal(mesh.n_dofs))
    return system, x, system.assemble(x, kind)
