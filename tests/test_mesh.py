import os
import subprocess
import sys

import meshio
import numpy as np
import pytest

from fem3d.discretisation.element import Q1, Q2
from gpucfd.errors import InputError, run_cli
from fem3d.discretisation.mesh import (
    Q2_FACE_NODES,
    VTK_HEX8_TO_TENSOR,
    _box_block,
    box_mesh,
    face_keys,
    graded_coordinates,
    greedy_colouring,
    mesh_from_hex8,
    read_mesh,
)
from fem3d.discretisation.mesh_checks import unique_rows
from fem3d.mesh import describe, main

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


@pytest.mark.parametrize(
    "vertices", [([0, 0.5, 0.4], [0, 1], [0, 1]), ([0, 1], [0, np.nan], [0, 1]), ([0, 1], [0, 1], [0, 1, 2])]
)
def test_box_rejects_vertices_that_do_not_increase(vertices):
    """A box's elements are checked through their vertex coordinates (each along an axis
    increasing, finite and one more than the elements), not their Jacobians."""
    with pytest.raises(InputError, match="box vertices along . must be . increasing finite numbers"):
        box_mesh(2 if len(vertices[0]) == 3 else 1, 1, 1, vertices=vertices)
    assert box_mesh(2, 1, 1, vertices=([0, 0.1, 1], [0, 1], [0, 1])).geometry[1, 0, 0] == 0.1


def test_general_mesh_from_hex8_matches_box():
    box = box_mesh(3, 2, 2)
    verts = box.points[box.pressure_nodes]
    hexes = box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)]  # tensor -> VTK order
    m = mesh_from_hex8(verts, hexes)
    assert (m.n_elements, m.n_nodes, m.n_pressure) == (box.n_elements, box.n_nodes, box.n_pressure)
    assert np.allclose(m.points[m.cells], map_points(m))
    assert np.allclose(np.sort(m.points, axis=0), np.sort(box.points, axis=0))
    assert m.colour_is_race_free() and len(m.boundary_faces) == len(box.boundary_faces)


@pytest.mark.parametrize("n, grading", [((5, 3, 4), (0.5, 1.0, 2.0)), ((7, 1, 2), 0.0), ((4, 4, 4), 1.0)])
def test_box_boundary_by_index_is_the_one_matched_by_face_keys(n, grading):
    """box_mesh marks its boundary faces by element index; matching the faces' vertex keys
    (the general path of _finish) finds the same faces in the same order, and the faces on
    each wall plane carry that wall's tag."""
    m = box_mesh(*n, grading=grading)
    keys = face_keys(m.pressure_cells)
    _, inverse, counts = unique_rows(keys)
    once = np.flatnonzero(counts[inverse] == 1)
    assert np.array_equal(6 * m.boundary_faces[:, 0] + m.boundary_faces[:, 1], once)
    xyz = m.points[m.pressure_nodes][keys[once]]  # (F, 4, 3)
    lo, hi = m.bounds()
    tags = np.full(len(once), -1)
    for d in range(3):
        tags[np.all(xyz[:, :, d] == lo[d], axis=1)] = 2 * d
        tags[np.all(xyz[:, :, d] == hi[d], axis=1)] = 2 * d + 1
    assert np.array_equal(m.boundary_tags, tags) and m.boundary_tags.dtype == np.int64
    assert len(once) == 2 * (n[0] * n[1] + n[1] * n[2] + n[0] * n[2])


@pytest.mark.parametrize(
    "n, grading", [((5, 3, 4), (0.5, 1.0, 2.0)), ((1, 2, 3), 0.0), ((1, 1, 1), 1.0), ((2, 1, 4), 0.0)]
)
def test_a_box_answers_from_its_grid_and_vertices_what_its_arrays_say(n, grading):
    """A whole box's counts, bounds, element ids, boundary faces and the nodes, geometry and
    coordinates of any elements or nodes, found without its arrays, are the arrays' (made
    afterwards, at their first use)."""
    box = box_mesh(*n, grading=grading)
    rng = np.random.default_rng(3)
    elements, nodes = rng.integers(0, box.n_elements, 40), rng.integers(0, box.n_nodes, (5, 4))
    faces = box.boundary_faces[rng.integers(0, len(box.boundary_faces), 30)]
    found = (
        (box.n_elements, box.n_nodes, box.n_pressure),
        box.colour_offsets,
        box.bounds(),
        box.element_ids,
        box.boundary_faces,
        box.boundary_tags,
        box.cells_of(elements),
        box.pressure_cells_of(elements),
        box.geometry_of(elements),
        box.vertices_of(elements),
        box.points_of(nodes),
        box.face_nodes_of(faces),
        box.elements_with_ids(box.element_ids[elements]),
    )
    assert not box.built and repr(box).endswith("built=False)")  # nothing above, not even its repr, made the arrays
    whole = _box_block(box.grid, box.box_vertices, (0, 0, 0), box.grid)  # the arrays, as box_piece makes a block's
    expected = (
        (whole.n_elements, whole.n_nodes, whole.n_pressure),
        whole.colour_offsets,
        whole._bounds,
        whole.element_ids,
        whole.boundary_faces,
        whole.boundary_tags,
        whole.cells[elements],
        whole.pressure_cells[elements],
        whole.geometry[elements],
        whole.points[whole.pressure_nodes[whole.pressure_cells[elements]]],
        whole.points[nodes],
        whole.cells[faces[:, :1], Q2_FACE_NODES[faces[:, 1]]],
        elements,
    )
    for a, b in zip(found, expected):
        assert all(np.array_equal(x, y) for x, y in zip(a, b)) if isinstance(a, tuple) else np.array_equal(a, b)
    assert np.array_equal(box.cells, whole.cells) and box.built  # made at the first use
    assert all(np.array_equal(getattr(box, k), getattr(whole, k)) for k in ("points", "geometry", "pressure_nodes"))


def test_box_numbering_dofs_valence_and_bounds():
    m = box_mesh(3, 2, 4, lengths=(3.0, 1.0, 2.0), origin=(-1.0, 0.5, 0.0))
    k, j, i = np.meshgrid(np.arange(9), np.arange(5), np.arange(7), indexing="ij")  # Q2 grid, i fastest
    assert np.array_equal(
        m.points, np.stack([-1.0 + 0.5 * i.ravel(), 0.5 + 0.25 * j.ravel(), 0.25 * k.ravel()], axis=1)
    )
    assert np.array_equal(m.pressure_nodes[[0, 1, 4, 13, 59]], [0, 2, 14, 2 * 7 * 5 + 2, 6 + 7 * (4 + 5 * 8)])
    first = m.element_ids.tolist().index(0)  # element (0, 0, 0): its Q2 nodes are the grid's first 3 x 3 x 3
    assert m.cells[first].tolist() == [a + 7 * b + 35 * c for c in range(3) for b in range(3) for a in range(3)]
    assert m.pressure_cells[first].tolist() == [0, 1, 4, 5, 12, 13, 16, 17]
    n = m.n_nodes
    assert np.array_equal(
        m.dofs(), np.concatenate([m.cells, m.cells + n, m.cells + 2 * n, m.pressure_cells + 3 * n], axis=1)
    )
    assert np.array_equal(m.dof_valence(), np.bincount(m.dofs().ravel()).astype(np.float64))
    assert m.dof_valence()[[0, 1, 3 * n, 3 * n + 1]].tolist() == [1.0, 1.0, 1.0, 2.0]
    lo, hi = m.bounds()
    assert lo.tolist() == [-1.0, 0.5, 0.0] and hi.tolist() == [2.0, 1.5, 2.0]


def sequential_greedy(vertex_cells):
    """The greedy colouring element after element (the reference for greedy_colouring's rounds)."""
    colours = np.full(len(vertex_cells), -1)
    for e, verts in enumerate(vertex_cells):
        used = set(colours[np.isin(vertex_cells, verts).any(axis=1)].tolist())
        colours[e] = min(set(range(len(used) + 1)) - used)
    return colours


@pytest.mark.parametrize("n_elements, n_vertices", [(60, 40), (400, 40)])  # 29 and 149 colours (three bit words)
def test_greedy_colouring_is_the_sequential_one_on_random_element_sets(n_elements, n_vertices):
    rng = np.random.default_rng(3)
    cells = np.array([rng.choice(n_vertices, 8, replace=False) for _ in range(n_elements)])
    colours = greedy_colouring(cells)
    assert (colours == sequential_greedy(cells)).all()
    for c in np.unique(colours):
        v = cells[colours == c].ravel()
        assert np.unique(v).size == v.size


@pytest.mark.parametrize("name, colours", [("box", 8), ("distorted", 8), ("twisted", 48), ("dfg", 16)])
def test_colouring_of_file_and_refined_meshes_is_race_free_and_greedy(name, colours):
    """Read: race-free, as many colours as the sequential greedy colouring of the same element
    order. Refined once (the DFG channel and a mesh of twisted element orientations): race-free,
    8 colours per class of parents, the classes the sequential greedy colouring of the parents
    by the (vertex, position) of their children (fem3d.discretisation.refine.Refined)."""
    from fem3d.discretisation.refine import CHILD_VERTICES
    from support import twisted_mesh

    if name == "distorted":
        mesh = read_mesh(os.path.join(MESHES, "distorted_cube_hex8.msh"))
        count = sequential_greedy(mesh.pressure_cells[np.argsort(mesh.element_ids)]).max() + 1
    else:
        coarse = {
            "box": lambda: box_mesh(3),
            "twisted": lambda: twisted_mesh(3),
            "dfg": lambda: read_mesh(os.path.join(MESHES, "dfg3d", "channel_coarse.msh")),
        }[name]()
        mesh = coarse.refined(1)
        keys = (coarse.cells[:, CHILD_VERTICES] * 8 + np.arange(8)[:, None]).reshape(coarse.n_elements, -1)
        count = 8 * (sequential_greedy(keys).max() + 1)
    assert mesh.colour_is_race_free() and mesh.n_colours == count
    assert colours is None or count == colours


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
    from gpucfd.backend import get_backend
    from fem3d.discretisation.fields import pressure_weights

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


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.msh"], "file not found"),
        (["MESHES/tet.vtu"], "no hexahedron"),
        (["MESHES/inverted.vtu"], "element 1 is inverted or degenerate"),
        (["MESHES/garbage.msh"], "meshio cannot read it"),
    ],
)
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
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.mesh", os.path.join(MESHES, "distorted_cube_hex8.msh")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and "elements 216" in p.stdout and "lid 36, walls 180, untagged 0" in p.stdout
    assert "multigrid: elements per level 216 -> 27 (its sheets paired); the coarsest, 1,093 unknowns" in p.stdout


# ------------------------------------------------------- broken mesh files (fem3d.discretisation.mesh_checks)


def box_hex8(nx, ny, nz, shift=(0.0, 0.0, 0.0)):
    """(vertices, hexes in VTK order) of a box mesh on [0, nx/ny...]: unit elements, moved by ``shift``."""
    box = box_mesh(nx, ny, nz, lengths=(nx, ny, nz))
    return box.points[box.pressure_nodes] + shift, box.pressure_cells[:, np.argsort(VTK_HEX8_TO_TENSOR)]


def write_hex8(path, vertices, hexes):
    meshio.write(str(path), meshio.Mesh(vertices, [("hexahedron", hexes)]))
    return str(path)


def seamed(offset):
    """The 4x2x2 box with the second half's vertices on the plane x = 2 written again (moved by ``offset``)."""
    verts, hexes = box_hex8(4, 2, 2)
    on_seam = np.flatnonzero(verts[:, 0] == 2.0)
    copies = len(verts) + np.arange(len(on_seam))
    renumber = np.arange(len(verts))
    renumber[on_seam] = copies
    right = verts[hexes].mean(axis=1)[:, 0] > 2.0
    hexes = hexes.copy()
    hexes[right] = renumber[hexes[right]]
    return np.concatenate([verts, verts[on_seam] + [offset, 0.0, 0.0]]), hexes, len(on_seam)


def test_coincident_nodes_of_a_seam_are_merged(tmp_path):
    verts, hexes, copies = seamed(0.0)
    seamless = mesh_from_hex8(*box_hex8(4, 2, 2))
    m = read_mesh(write_hex8(tmp_path / "seam.vtu", verts, hexes))
    assert copies == 9 and m.merged_nodes == 9
    assert (m.n_elements, m.n_nodes, m.n_pressure, m.n_dofs) == (16, 9 * 5 * 5, 5 * 3 * 3, seamless.n_dofs)
    assert len(m.boundary_faces) == len(seamless.boundary_faces) == 2 * (4 * 2 + 4 * 2 + 2 * 2)
    assert np.array_equal(
        np.unique(m.points[m.boundary_nodes()], axis=0), np.unique(seamless.points[seamless.boundary_nodes()], axis=0)
    )
    assert "merged 9 coincident nodes" in describe(m)


def broken_meshes(tmp_path):
    """name -> (file, expected message) of hand-made broken meshes."""
    cases = {}
    (tmp_path / "empty.msh").write_bytes(b"")
    cases["empty"] = ("empty.msh", "is empty (0 bytes)")
    (tmp_path / "garbage.msh").write_bytes(bytes(range(256)) * 8)
    cases["garbage"] = ("garbage.msh", "meshio cannot read it")
    (tmp_path / "folder.msh").mkdir()
    cases["directory"] = ("folder.msh", "is a directory, not a mesh file")
    meshio.write(str(tmp_path / "tets.vtu"), meshio.Mesh(np.eye(4, 3), [("tetra", np.array([[0, 1, 2, 3]]))]))
    cases["tets only"] = ("tets.vtu", "no hexahedron or hexahedron27 cells (cell types: tetra)")
    verts, hexes = box_hex8(2, 1, 1)
    meshio.write(str(tmp_path / "mixed.vtu"), meshio.Mesh(verts, [("hexahedron", hexes), ("tetra", hexes[:1, :4])]))
    cases["mixed"] = ("mixed.vtu", "mixes the solid cell types hexahedron, tetra")
    inverted = hexes.copy()
    inverted[1] = inverted[1][[4, 5, 6, 7, 0, 1, 2, 3]]
    write_hex8(tmp_path / "inverted.vtu", verts, inverted)
    cases["inverted"] = ("inverted.vtu", "element 1 is inverted or degenerate")
    nan = verts.copy()
    nan[5, 1] = np.nan
    write_hex8(tmp_path / "nan.vtu", nan, hexes)
    cases["NaN point"] = ("nan.vtu", "point 5 of the mesh has a non-finite coordinate")
    write_hex8(tmp_path / "twice.vtu", verts, np.concatenate([hexes, hexes[1:]]))
    cases["duplicated element"] = ("twice.vtu", "elements 1 and 2 are the same element (the same 8 vertices)")
    (va, ha), (vb, hb) = box_hex8(1, 1, 1), box_hex8(1, 1, 1, shift=(3.0, 0.0, 0.0))
    write_hex8(tmp_path / "apart.vtu", np.concatenate([va, vb]), np.concatenate([ha, hb + len(va)]))
    cases["two cubes"] = ("apart.vtu", "the mesh has 2 disconnected parts")
    verts, hexes, _ = seamed(1e-7)
    write_hex8(tmp_path / "crack.vtu", verts, hexes)
    cases["crack"] = ("crack.vtu", "8 boundary faces lie inside the domain")
    va, ha = box_hex8(2, 1, 1)
    far = va[ha[1]].copy()
    far[[1, 2, 5, 6], 0] = 3.0  # a third element on the face x = 1, overlapping the second
    write_hex8(tmp_path / "three.vtu", np.concatenate([va, far]), np.concatenate([ha, [len(va) + np.arange(8)]]))
    cases["face of three"] = ("three.vtu", "a face is shared by 3 elements (0, 1, 2)")
    return cases


def test_broken_meshes_are_one_line_input_errors(tmp_path, capsys):
    for name, (file, message) in broken_meshes(tmp_path).items():
        assert run_cli(main, [str(tmp_path / file)], prog="fem3d.discretisation.mesh") == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"fem3d.discretisation.mesh: error: --mesh {tmp_path / file}") and message in err, (
            name,
            err,
        )
        assert err.count("\n") == 1, (name, err)


def test_unknown_tag_field_lists_the_integer_fields(capsys):
    path = os.path.join(MESHES, "distorted_cube_hex8.msh")
    assert run_cli(main, [path, "--tag-field", "nope"], prog="fem3d.discretisation.mesh") == 2
    assert capsys.readouterr().err == (
        f"fem3d.discretisation.mesh: error: --mesh {path}: --tag-field 'nope' is not integer cell data "
        "of the file (integer cell data: gmsh:geometrical, gmsh:physical)\n"
    )


def test_a_face_with_two_tags_is_named(tmp_path):
    """A boundary quad listed twice with different tags: an input error naming the face."""
    cube = np.array(
        [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], dtype=float
    )
    quads = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 5, 4], [3, 2, 6, 7], [0, 3, 7, 4], [1, 2, 6, 5], [4, 5, 6, 7]])
    path = tmp_path / "twice.msh"
    meshio.write(
        str(path),
        meshio.Mesh(
            cube,
            [("hexahedron", np.arange(8)[None]), ("quad", quads)],
            cell_data={
                "gmsh:physical": [np.array([1]), np.array([1, 2, 1, 1, 1, 1, 3])],
                "gmsh:geometrical": [np.array([1]), np.ones(7, dtype=int)],
            },
        ),
        file_format="gmsh22",
        binary=False,
    )
    with pytest.raises(InputError, match=r"the boundary face at \(0.5, 0.5, 1\) carries two tags, 2 and 3"):
        read_mesh(str(path))


def test_a_box_measures_its_elements_from_its_vertex_coordinates_as_any_mesh_does():
    """HexMesh.axis_lengths of a whole graded box (from its vertex coordinates along each
    axis) equal, bit for bit, the mean edge lengths that any mesh computes: the same box not
    known as a box, and the rows of a part of it."""
    from dataclasses import replace

    from fem3d.parallel.partition import submesh

    mesh = box_mesh(5, 4, 6, grading=(1.0, 0.5, 1.5))
    general = replace(mesh, grid=None).axis_lengths
    assert np.array_equal(mesh.axis_lengths, general) and mesh.axis_lengths.shape == (120, 3)
    part, _, _ = submesh(mesh, np.arange(40, 100))
    assert np.array_equal(part.axis_lengths, general[40:100])
    assert mesh.stretches.max() > 2.0  # graded: the boundary's elements are stretched


def test_points_are_located_on_a_box_as_on_any_mesh():
    """On a whole graded box the bracketing element is tried first (HexMesh.box_vertices): the
    same elements and reference coordinates as the nearest-centre search of a mesh that is not
    known as a box; points outside stay outside; a part of a box is no whole box."""
    from dataclasses import replace

    from fem3d.discretisation.fields import locate
    from fem3d.parallel.partition import submesh

    mesh = box_mesh(5, 4, 6, grading=(1.0, 0.5, 1.5))
    assert [len(v) for v in mesh.box_vertices] == [6, 5, 7] and mesh.box_vertices[0][[0, -1]].tolist() == [0.0, 1.0]
    read = type(mesh).box_vertices.func(mesh)  # box_mesh sets them: what the property reads from the geometry
    assert all(np.array_equal(given, back) for given, back in zip(mesh.box_vertices, read))
    rng = np.random.default_rng(4)
    points = np.concatenate([rng.uniform(0, 1, (200, 3)), [[1.5, 0.5, 0.5], [0.5, -0.1, 0.5], [0.0, 1.0, 0.3]]])
    elem, xi = locate(mesh, points)
    ref_elem, ref_xi = locate(replace(mesh, grid=None), points)
    assert np.array_equal(elem[:200], ref_elem[:200]) and np.abs(xi - ref_xi).max() < 1e-12
    assert elem[200:202].tolist() == [-1, -1] and elem[202] >= 0  # outside, outside, on the box's edge
    corners = mesh.geometry[elem[:200]]
    assert ((corners[:, 0] <= points[:200] + 1e-15) & (points[:200] <= corners[:, -1] + 1e-15)).all()
    assert submesh(mesh, np.arange(60))[0].box_vertices is None  # half of the box (a rank's part)


def test_points_are_located_in_the_nearest_containing_candidate(monkeypatch):
    """locate tries the nearest centre's element, then the other candidates together (in
    batches of fields.BATCH point-element pairs, 40 here): the same elements and reference
    coordinates as trying the candidates one at a time, nearest first; outside points stay
    outside."""
    from dataclasses import replace

    from fem3d.discretisation import fields
    from fem3d.discretisation.element import Q1

    mesh = replace(box_mesh(4, 4, 4, lengths=(1.0, 1.0, 8.0), grading=2.0), grid=None)  # long thin elements, no box
    rng = np.random.default_rng(9)
    at = rng.uniform(-0.98, 0.98, (60, 3))  # random points of random elements
    inside = np.einsum("pg,pgd->pd", Q1.values(at), mesh.geometry[rng.integers(0, mesh.n_elements, 60)])
    points = np.concatenate([inside, [[5.0, 0.0, 0.0], [0.0, 0.0, -1.0]]])
    monkeypatch.setattr(fields, "BATCH", 40)
    elem, xi = fields.locate(mesh, points)
    _, cand = mesh.centre_tree.query(points, k=27)
    ref = np.full(len(points), -1)
    for p in range(len(points)):  # one candidate at a time, nearest first
        for e in cand[p]:
            r = fields._reference(mesh, points[p : p + 1], np.array([e]))[0]
            if (np.abs(r) <= 1 + 1e-8).all():
                ref[p] = e
                assert np.abs(np.clip(r, -1, 1) - xi[p]).max() < 1e-12
                break
    assert np.array_equal(elem, ref) and (elem[:60] >= 0).all() and elem[60:].tolist() == [-1, -1]
    assert (elem[:60] != cand[:60, 0]).any()  # some points lie beyond their nearest centre's element
