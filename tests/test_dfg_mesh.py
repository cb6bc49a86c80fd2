"""The committed coarse mesh of the DFG 3D-1Z cylinder benchmark (meshes/dfg3d).

Exact references: the Q2 geometry replaces the circle r = 0.05 by ``AROUND`` parabolic
arcs through the points at angles -phi, 0, phi (phi = pi / AROUND), x(t) = r (1 - t^2 (1 -
cos phi)), y(t) = r t sin phi for t in [-1, 1]. Each arc and its two radii enclose
r^2 sin phi (4 - cos phi) / 3 (= r^2 (phi - phi^5 / 30 + ...)) and the arc is
r [sqrt(s^2 + 4 (1 - c)^2) + s^2 asinh(2 (1 - c) / s) / (2 (1 - c))] long (s, c = sin phi,
cos phi; = 2 r (phi - phi^5 / 60 + ...)). The following terms are of opposite sign to
the phi^5 ones, so the arcs miss the disc's area by less than pi r^2 phi^4 / 30 and its
circumference by less than 2 pi r phi^4 / 60.
"""

import os
import subprocess
import sys

import meshio
import numpy as np
import pytest

from fem3d.discretisation.element import Q2, gauss_hex, gauss_legendre
from fem3d.discretisation.fields import pressure_weights
from fem3d.discretisation.geometry import determinant, jacobians
from fem3d.discretisation.mesh import Q2_FACE_NODES, read_mesh
from gpucfd.backend import get_backend

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MESH = os.path.join(ROOT, "meshes", "dfg3d", "channel_coarse.msh")
L, H, R, AROUND, NZ = 2.5, 0.41, 0.05, 16, 6
PHI = np.pi / AROUND
DISC = AROUND * R**2 * np.sin(PHI) * (4 - np.cos(PHI)) / 3  # area inside the parabolic arcs
S, C = np.sin(PHI), 1 - np.cos(PHI)
PERIMETER = AROUND * R * (np.sqrt(S**2 + 4 * C**2) + S**2 * np.arcsinh(2 * C / S) / (2 * C))


@pytest.fixture(scope="module")
def mesh():
    return read_mesh(MESH)


def face_areas(mesh, tag, n_gauss=8):
    """Area of the boundary faces tagged ``tag``: n_gauss^2 Gauss points on each face's biquadratic map."""
    faces = mesh.boundary_faces[mesh.boundary_tags == mesh.tag_names[tag]]
    X = mesh.points[mesh.cells[faces[:, 0][:, None], Q2_FACE_NODES[faces[:, 1]]]]  # (F, 9, 3), first face axis fastest
    t, w = gauss_legendre(n_gauss)
    shape = np.stack([t * (t - 1) / 2, 1 - t**2, t * (t + 1) / 2], axis=1)  # 1D quadratic shape functions
    dl = np.stack([t - 0.5, -2 * t, t + 0.5], axis=1)
    du = np.einsum("ip,jq,fqpd->fijd", dl, shape, X.reshape(-1, 3, 3, 3))  # d/d(first axis) at Gauss point (i, j)
    dv = np.einsum("ip,jq,fqpd->fijd", shape, dl, X.reshape(-1, 3, 3, 3))
    return np.einsum("fij,i,j->", np.linalg.norm(np.cross(du, dv), axis=-1), w, w)


def test_tags_counts_and_boundary(mesh):
    assert set(mesh.tag_names) == {"inflow", "outflow", "walls", "cylinder"}
    assert (mesh.boundary_tags >= 0).all()
    assert (mesh.n_elements, mesh.n_nodes, mesh.n_pressure, mesh.n_dofs) == (624, 6188, 938, 19502)
    counts = {name: int((mesh.boundary_tags == t).sum()) for name, t in mesh.tag_names.items()}
    assert counts == {"inflow": 4 * NZ, "outflow": 4 * NZ, "walls": 424, "cylinder": AROUND * NZ}
    assert np.allclose(mesh.points.min(axis=0), 0) and np.allclose(mesh.points.max(axis=0), [L, H, H])


def test_cylinder_nodes_on_the_circle(mesh):
    p = mesh.points[mesh.boundary_nodes(["cylinder"])]
    assert len(p) == 2 * AROUND * (2 * NZ + 1)  # 2 * AROUND nodes round each of the 2 NZ + 1 Q2 planes in z
    assert np.abs(np.hypot(p[:, 0] - 0.5, p[:, 1] - 0.2) - R).max() < 1e-12
    assert np.allclose(np.unique(p[:, 2]), np.linspace(0, H, 2 * NZ + 1))


def test_pressure_points_are_vertices(mesh):
    vertices = mesh.points[mesh.pressure_nodes]
    for point in ((0.45, 0.2, 0.205), (0.55, 0.2, 0.205)):
        assert np.linalg.norm(vertices - point, axis=1).min() < 1e-12


def test_volume_is_the_channel_less_the_arcs_cylinder(mesh):
    volume = pressure_weights(get_backend("cpu"), mesh).sum()  # 3^3 Gauss points: exact for this extruded Q2 map
    assert volume == pytest.approx(H * (L * H - DISC), rel=1e-13)
    excess = volume - H * (L * H - np.pi * R**2)
    assert 0 < excess < H * np.pi * R**2 * PHI**4 / 30 and excess > 0.9 * H * np.pi * R**2 * PHI**4 / 30


def test_face_areas(mesh):
    assert face_areas(mesh, "inflow") == pytest.approx(H * H, rel=1e-13)
    assert face_areas(mesh, "outflow") == pytest.approx(H * H, rel=1e-13)
    walls = face_areas(mesh, "walls")
    assert walls == pytest.approx(4 * L * H - 2 * DISC, rel=1e-13)
    assert 0 < walls - (4 * L * H - 2 * np.pi * R**2) < 2 * np.pi * R**2 * PHI**4 / 30
    cylinder = face_areas(mesh, "cylinder")
    assert cylinder == pytest.approx(H * PERIMETER, rel=1e-12)
    assert 0.9 * PHI**4 / 60 < 1 - cylinder / (np.pi * 2 * R * H) < PHI**4 / 60


def test_element_quality(mesh):
    points, weights = gauss_hex(3)
    det = determinant(np, jacobians(np, mesh.geometry, Q2.gradients(points)))
    volumes = det @ weights
    assert (det > 0).all() and (det.min(axis=1) / det.max(axis=1)).min() > 0.45
    assert volumes.min() == pytest.approx(5.72e-5, rel=0.01) and volumes.max() < 32 * volumes.min()
    lengths = np.linalg.norm(
        jacobians(np, mesh.geometry, Q2.gradients(np.zeros((1, 3))))[:, 0], axis=1
    )  # |dx/dxi_k| at the centre
    assert (lengths.max(axis=1) / lengths.min(axis=1)).max() < 3.9  # multigrid needs cells not much longer than wide
    on_cylinder = mesh.boundary_faces[mesh.boundary_tags == mesh.tag_names["cylinder"], 0]
    assert np.argmin(volumes) in on_cylinder and np.argmax(volumes) not in on_cylinder


def test_generator_reproduces_the_committed_file(tmp_path):
    out = tmp_path / "channel.msh"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "meshes", "dfg3d", "make_channel.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    new, old = meshio.read(str(out)), meshio.read(MESH)
    assert new.points.shape == old.points.shape and np.abs(new.points - old.points).max() < 1e-12
    assert [b.type for b in new.cells] == [b.type for b in old.cells] == ["quad9", "hexahedron27"]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(new.cells, old.cells))
    assert all(np.array_equal(a, b) for a, b in zip(new.cell_data["gmsh:physical"], old.cell_data["gmsh:physical"]))
    assert {k: v.tolist() for k, v in new.field_data.items()} == {k: v.tolist() for k, v in old.field_data.items()}


def test_generator_rejects_bad_options(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "meshes", "dfg3d", "make_channel.py"),
            "--out",
            str(tmp_path / "x.msh"),
            "--around",
            "12",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 2 and "around must be a positive multiple of 8 (got 12)" in p.stderr
    assert not (tmp_path / "x.msh").exists()
