"""Element quality (aspect ratio, scaled Jacobian) and the Jacobian check between the nodes
(fem3d.discretisation.geometry), and the quality line of ``python -m fem3d.mesh``."""

import os

import meshio
import numpy as np
import pytest

from fem3d.discretisation.element import Q1, Q2, LagrangeHex
from fem3d.discretisation.geometry import (
    SAMPLES,
    check_elements,
    determinant,
    determinant_bounds,
    element_quality,
    jacobians,
    volume_scale,
)
from fem3d.discretisation.mesh import TENSOR27_TO_VTK, VTK_HEX8_TO_TENSOR, box_mesh, read_mesh
from fem3d.discretisation.refine import LATTICE
from fem3d.mesh import main
from gpucfd.errors import InputError

MESHES = os.path.join(os.path.dirname(__file__), "..", "meshes")


@pytest.mark.parametrize("geo", [Q1, Q2])
def test_box_aspect_is_its_side_ratio_and_scaled_jacobian_one(geo):
    sides = np.array([[1.5, 1.0, 0.5], [1.0, 1.0, 1.0]])  # (E, 3)
    X = (geo.nodes + 1) / 2 * sides[:, None, :] + [[[7.0, -3.0, 2.0]]]
    aspect, scaled = element_quality(X)
    assert np.allclose(aspect, [3.0, 1.0]) and np.allclose(scaled, 1.0)


@pytest.mark.parametrize("geo", [Q1, Q2])
def test_sheared_and_mirrored_elements(geo):
    """A parallelepiped with axes (1, 0, 0), (0, 1, 0), (1, 0, 1): |J_3| / |J_1| = sqrt 2 and
    scaled Jacobian 1 / sqrt 2 everywhere; its mirror image is inverted: scaled Jacobian -1 / sqrt 2."""
    X = geo.nodes @ np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    aspect, scaled = element_quality(np.stack([X, X * [-1.0, 1.0, 1.0]]))
    assert np.allclose(aspect, np.sqrt(2.0)) and np.allclose(scaled, [0.5**0.5, -(0.5**0.5)])


def test_samples_are_the_nodes_of_the_children():
    """The check's lattice holds the 27 nodes and is the children's nodes (refine.LATTICE), so the
    children of an element that passes are valid at their nodes."""
    samples = set(map(tuple, SAMPLES))
    assert len(samples) == 125 and set(map(tuple, Q2.nodes)) <= samples and samples == set(map(tuple, LATTICE / 2 - 1))


def folded_pair_file(path) -> str:
    """Two unit hex27 elements along x; element 1's mid-edge node 1 (reference (0, -1, -1)) is
    moved by (-0.2, -0.4, 0.7): det J > 0 at its 27 nodes, < 0 at (-1/2, -1, -1)."""
    box = box_mesh(2, 1, 1, lengths=(2.0, 1.0, 1.0))
    cells = box.cells[np.argsort(box.element_ids)]  # file element k = box element k, at x in [k, k + 1]
    points = box.points.copy()
    points[cells[1, 1]] += (-0.2, -0.4, 0.7)
    meshio.write(str(path), meshio.Mesh(points, [("hexahedron27", cells[:, TENSOR27_TO_VTK])]))
    return str(path)


def test_a_fold_between_the_nodes_is_named(tmp_path):
    path = folded_pair_file(tmp_path / "folded.vtu")
    X = meshio.read(path).points[meshio.read(path).cells[0].data[:, np.argsort(TENSOR27_TO_VTK)]]
    at_nodes = determinant(np, jacobians(np, X, Q2.gradients(Q2.nodes)))  # what the check sampled before
    assert at_nodes.min() > 0.01
    with pytest.raises(
        InputError,
        match=r"^element 1 is inverted or degenerate \(Jacobian determinant -0.007 at "
        r"reference point \(-0.6, -1.0, -1.0\)\); 1 bad element\(s\) in total",
    ):
        check_elements(X, np.arange(2))
    with pytest.raises(InputError, match=r"folded.vtu: element 1 is inverted or degenerate .* \(-0.6, -1.0, -1.0\)"):
        read_mesh(path)


def test_a_fold_that_no_lattice_sees_is_found():
    """A hex27 element whose det J is positive on the 5x5x5 lattice and on the 6x6x6 lattice of
    its degree (5 per axis) but negative near (-0.83, 1, 1): the Bernstein bound does not
    prove it valid, and the halving search finds a point where det J < 0 (checked directly)."""
    X = (Q2.nodes + 1) / 2
    X[0] += (0.0406, -0.3862, 0.139)
    X[15] += (-0.0815, -0.0295, 0.1662)
    X[26] += (1.4422, 0.7188, 0.544)

    def det(points):
        return determinant(np, jacobians(np, X[None], Q2.gradients(np.atleast_2d(points))))[0]

    lattice = LagrangeHex(5).nodes
    assert det(SAMPLES).min() > 0.003 and det(lattice).min() > 0.003 and det(LagrangeHex(24).nodes).min() < -0.008
    assert determinant_bounds(X[None])[0] < 0
    with pytest.raises(InputError, match=r"^element 7 is inverted or degenerate \(Jacobian determinant -0.00782 at "):
        check_elements(X[None], np.array([7]))
    assert det([-0.8, 1.0, 1.0])[0] == pytest.approx(-0.00782, abs=1e-5)


def test_valid_curved_elements_are_proved_valid_without_a_search():
    """The committed meshes (curved hex27 around cylinders and pipes, boundary layers of aspect
    186, a distorted hex8 cube): every element's Bernstein bound of det J is positive."""
    for name in ("dfg3d/channel_coarse.msh", "dfg3d/channel_boundary_layer.msh", "pipe/pipe.msh", "annulus_hex27.msh"):
        X = read_mesh(os.path.join(MESHES, name)).geometry
        assert (determinant_bounds(X) > 0.05 * volume_scale(X)).all(), name


def test_mesh_cli_prints_the_worst_elements(tmp_path, capsys):
    """Three unit cubes along x; element 2 stretched to length 3 (aspect 3), element 0's edge
    x = 0, z = 1 moved to x = -1 (scaled Jacobian 1 / sqrt 2 at its corners)."""
    box = box_mesh(3, 1, 1, lengths=(3.0, 1.0, 1.0))
    vertices = box.points[box.pressure_nodes].copy()
    hexes = box.pressure_cells[np.argsort(box.element_ids)][:, np.argsort(VTK_HEX8_TO_TENSOR)]
    vertices[vertices[:, 0] == 3.0, 0] = 5.0
    vertices[(vertices[:, 0] == 0.0) & (vertices[:, 2] == 1.0), 0] = -1.0
    path = tmp_path / "three.vtu"
    meshio.write(str(path), meshio.Mesh(vertices, [("hexahedron", hexes)]))
    assert main([str(path)]) == 0
    assert (
        "largest aspect ratio 3 (element 2 at (3.5, 0.5, 0.5)), "
        "smallest scaled Jacobian 0.707 (element 0 at (0.25, 0.5, 0.5))"
    ) in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "name, aspect, scaled", [("distorted_cube_hex8.msh", 1.128, 0.9537), ("annulus_hex27.msh", 1.591, 1.0)]
)
def test_sample_meshes_quality(name, aspect, scaled):
    a, s = element_quality(read_mesh(os.path.join(MESHES, name)).geometry)
    assert a.max() == pytest.approx(aspect, abs=1e-3) and s.min() == pytest.approx(scaled, abs=1e-4)
