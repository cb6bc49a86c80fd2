"""The sample meshes of meshes/pipe, meshes/dfg2d and the DFG 3D boundary-layer channel: each
generator reproduces its committed file, curved walls carry their Q2 nodes on the exact circle,
every element's Jacobian is positive, and the boundary layer's first ring is at least 20
times thinner than the spacing round the cylinder."""

import os
import subprocess
import sys

import numpy as np
import pytest

from fem3d.discretisation.element import Q2, gauss_hex
from fem3d.discretisation.geometry import determinant, jacobians
from fem3d.discretisation.mesh import Q2_FACE_NODES, read_mesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# committed file: (generator and its options, curved tag, circle centre (two coordinates), their axes, radius)
MESHES = {
    "dfg3d/channel_boundary_layer.msh": (
        [
            "dfg3d/make_channel.py",
            "--around",
            "24",
            "--rings",
            "14",
            "--upstream",
            "2",
            "--downstream",
            "12",
            "--nz",
            "8",
            "--first-layer",
            "0.045",
            "--binary",
        ],
        "cylinder",
        (0.5, 0.2),
        (0, 1),
        0.05,
    ),
    "pipe/pipe.msh": (["pipe/make_pipe.py"], "wall", (0.0, 0.0), (1, 2), 0.5),
    "dfg2d/slab.msh": (["dfg2d/make_slab.py"], "cylinder", (0.2, 0.2), (0, 1), 0.05),
}


@pytest.mark.parametrize("name", sorted(MESHES))
def test_generator_reproduces_the_committed_file(name, tmp_path):
    generator, *options = MESHES[name][0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "meshes", generator), *options, "--out", str(tmp_path / "m.msh")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    with open(os.path.join(ROOT, "meshes", name), "rb") as committed:
        assert (tmp_path / "m.msh").read_bytes() == committed.read()


@pytest.mark.parametrize("name", sorted(MESHES))
def test_curved_wall_and_jacobians(name):
    _, tag, centre, axes, radius = MESHES[name]
    mesh = read_mesh(os.path.join(ROOT, "meshes", name))
    faces = mesh.boundary_faces[mesh.boundary_tags == mesh.tag_names[tag]]
    nodes = mesh.points[mesh.cells[faces[:, 0][:, None], Q2_FACE_NODES[faces[:, 1]]]].reshape(-1, 3)
    assert np.abs(np.hypot(*(nodes[:, axes] - centre).T) - radius).max() < 1e-15
    det = determinant(np, jacobians(np, mesh.geometry, Q2.gradients(gauss_hex(3)[0])))
    assert (det > 0).all()


def test_boundary_layer_first_ring():
    mesh = read_mesh(os.path.join(ROOT, "meshes", "dfg3d", "channel_boundary_layer.msh"))
    on_cylinder = mesh.boundary_faces[mesh.boundary_tags == mesh.tag_names["cylinder"], 0]
    corners = mesh.points[mesh.pressure_cells[on_cylinder]]  # (F, 8, 3), tensor order: local a fastest
    edges = np.linalg.norm(corners[:, [1, 2, 4]] - corners[:, [0, 0, 0]], axis=-1)  # along a, b, c from corner 0
    in_plane = np.sort(edges[:, :2], axis=1)
    assert (in_plane[:, 1] / in_plane[:, 0]).min() > 20
