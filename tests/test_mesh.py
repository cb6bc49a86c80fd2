import os
import subprocess
import sys

import meshio
import numpy as np
import pytest

from fem3d.element import Q1, Q2
from fem3d.errors import InputError
from fem3d.mesh import (VTK_HEX8_TO_TENSOR, box_mesh, graded_coordinates, greedy_colouring, mesh_from_hex8, read_mesh)

MESHES = os.path.join(os.path.dirname(__file__), "..", "meshes")


def map_points(mesh):
    """Physical position of each element's 27 Q2 nodes through its geometry map."""
    geo = Q1 if mesh.geometry.shape[1] == 8 else Q2
    return np.einsum("tg,egd->etd", geo.values(Q2.nodes), mesh.geometry)


def test_box_counts_numbering_and_tags():
    m = box_mesh(2, 3, 1, lengths=(2.0, 1.0, 0.5))
    assert (m.n_elements, m.n_nodes, m.n_pressure) == (6, 5 * 7 * 3, 3 * 4 * 2)
    assert m.n_dofs == 3 * 105 + 24 and m.dofs().shape == (6, 89)
    assert np.allclose(m.points[m.cells], map_points(m))
    assert np.allclose(m.points[m.pressure_nodes][m.pressure_cells], m.geometry)
    assert len(m.boundary_faces) == 2 * (2 * 3 + 3 * 1 + 2 * 1)
    counts = {name: int((m.boundary_tags == t).sum()) for name, t in m.tag_names.items()}
    assert counts == {"x0": 3, "x1": 3, "y0": 2, "y1": 2, "z0": 6, "z1": 6}
    lid = m.boundary_nodes(["y1"])
    assert len(lid) == 5 * 3 and np.all(m.points[lid, 1] == 1.0)
    assert len(m.boundary_nodes()) == 105 - 3 * 5 * 1
    with pytest.raises(InputError, match="boundary tag 'lid' not in the mesh"):
        m.boundary_nodes(["lid"])


def test_box_colouring_is_parity_and_race_free():
    m = box_mesh(3, 4, 5)
    assert m.n_colours == 8 and m.colour_is_race_free()
    assert np.bincount(m.node_valence()).nonzero()[0].tolist() == [1, 2, 4, 8]


def test_race_check_detects_conflicts():
    m = box_mesh(2)
    m.colour_offsets = np.array([0, m.n_elements])  # one colour: neighbours share nodes
    assert not m.colour_is_race_free()


def test_grading_clusters_toward_walls():
    x = graded_coordinates(10, 2.0, 1.5)
    dx = np.diff(x)
    assert x[0] == 0.0 and x[-1] == 2.0 and np.all(dx > 0)
    assert dx[0] < 0.5 * dx[5] and np.allclose(dx, dx[::-1])
    assert np.allclose(graded_coordinates(4, 1.0, 0.0), np.linspace(0, 1, 5))
    m = box_mesh(4, grading=(1.0, 0.0, 2.0))
    assert np.allclose(m.points[m.cells], map_points(m))


@pytest.mark.parametrize("bad", [dict(nx=0), dict(nx=2, ny=-1), dict(nx=1.5)])
def test_box_rejects_bad_counts(bad):
    with pytest.raises(InputError, match="must be an integer >= 1"):
        box_mesh(**bad)


def test_general_mesh_from_hex8_matches_box():
    box = box_mesh(3, 2, 2)
    verts = box.points[box.pressure_nodes]
    hexes = box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)]  # tensor -> VTK order
    m = mesh_from_hex8(verts, hexes)
    assert (m.n_elements, m.n_nodes, m.n_pressure) == (box.n_elements, box.n_nodes, box.n_pressure)
    assert np.allclose(m.points[m.cells], map_points(m))
    assert np.allclose(np.sort(m.points, axis=0), np.sort(box.points, axis=0))
    assert m.colour_is_race_free() and len(m.boundary_faces) == len(box.boundary_faces)


def test_greedy_colouring_is_race_free_on_random_element_sets():
    rng = np.random.default_rng(3)
    cells = np.array([rng.choice(40, 8, replace=False) for _ in range(60)])
    colours = greedy_colouring(cells)
    for c in np.unique(colours):
        v = cells[colours == c].ravel()
        assert np.unique(v).size == v.size


def test_read_distorted_hex8_sample():
    m = read_mesh(os.path.join(MESHES, "distorted_cube_hex8.msh"))
    assert (m.n_elements, m.n_nodes, m.n_pressure) == (216, 13**3, 7**3)
    assert set(m.tag_names) == {"lid", "walls"} and (m.boundary_tags >= 0).all()
    assert np.allclose(m.points[m.boundary_nodes(["lid"]), 1], 1.0)
    assert len(m.boundary_nodes(["lid"])) == 13 * 13
    assert m.colour_is_race_free() and np.allclose(m.points[m.cells], map_points(m))
    interior = np.all((m.points > 1e-12) & (m.points < 1 - 1e-12), axis=1)
    assert np.abs(m.points[interior] - np.round(m.points[interior] * 12) / 12).max() > 1e-3  # really distorted


def test_read_hex27_sample_has_curved_exact_geometry():
    from fem3d.backend import get_backend
    from fem3d.fields import pressure_weights

    m = read_mesh(os.path.join(MESHES, "annulus_hex27.msh"))
    assert m.geometry.shape[1:] == (27, 3) and set(m.tag_names) == {"inner", "outer", "ends"}
    r = np.hypot(*m.points[m.boundary_nodes(["outer"])][:, :2].T)
    assert np.allclose(r, 1.0)
    volume = pressure_weights(get_backend("cpu"), m).sum()
    assert abs(volume - np.pi * 0.75 * 0.5) < 2e-4 * volume  # triquadratic arcs, 16 around
    assert m.colour_is_race_free()


def test_missing_file_and_file_without_hexahedra(tmp_path):
    with pytest.raises(InputError, match="--mesh file not found"):
        read_mesh(str(tmp_path / "nope.msh"))
    tet = tmp_path / "tet.vtu"
    meshio.write(str(tet), meshio.Mesh(np.eye(4, 3), [("tetra", np.array([[0, 1, 2, 3]]))]))
    with pytest.raises(InputError, match="no hexahedron or hexahedron27 cells .*tetra"):
        read_mesh(str(tet))


def test_inverted_element_is_named(tmp_path):
    box = box_mesh(2, 1, 1)
    hexes = box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)]
    hexes[1] = hexes[1][[4, 5, 6, 7, 0, 1, 2, 3]]  # flip top and bottom: inverted
    path = tmp_path / "inverted.vtu"
    meshio.write(str(path), meshio.Mesh(box.points[box.pressure_nodes], [("hexahedron", hexes)]))
    with pytest.raises(InputError, match="element 1 is inverted or degenerate"):
        read_mesh(str(path))


@pytest.mark.parametrize("args, message", [
    (["missing.msh"], "file not found"),
    (["MESHES/tet.vtu"], "no hexahedron"),
    (["MESHES/inverted.vtu"], "element 1 is inverted or degenerate"),
    (["MESHES/garbage.msh"], "meshio cannot read it"),
])
def test_mesh_cli_bad_input_exits_2_with_one_line(tmp_path, args, message):
    meshio.write(str(tmp_path / "tet.vtu"), meshio.Mesh(np.eye(4, 3), [("tetra", np.array([[0, 1, 2, 3]]))]))
    box = box_mesh(2, 1, 1)
    hexes = box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)]
    hexes[1] = hexes[1][[4, 5, 6, 7, 0, 1, 2, 3]]
    meshio.write(str(tmp_path / "inverted.vtu"), meshio.Mesh(box.points[box.pressure_nodes], [("hexahedron", hexes)]))
    (tmp_path / "garbage.msh").write_text("not a mesh\n")
    args = [a.replace("MESHES", str(tmp_path)) for a in args]
    p = subprocess.run([sys.executable, "-m", "fem3d.mesh", *args], capture_output=True, text=True)
    assert p.returncode == 2 and message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_mesh_cli_summary():
    p = subprocess.run([sys.executable, "-m", "fem3d.mesh", os.path.join(MESHES, "distorted_cube_hex8.msh")], capture_output=True, text=True)
    assert p.returncode == 0 and "elements 216" in p.stdout and "lid 36, walls 180, untagged 0" in p.stdout
