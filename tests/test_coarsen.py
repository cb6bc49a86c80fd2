"""Coarsening of hexahedral meshes by pairing their sheets (fem3d.discretisation.coarsen): the
multigrid levels below a file mesh, checked against the box coarsening and exact interpolation."""

import os

import numpy as np
import pytest

from fem3d.discretisation.coarsen import coarsen, element_sheets
from fem3d.discretisation.mesh import read_mesh
from fem3d.solvers.multigrid import Transfers, child_boxes, coarse_levels, coarsest_size, split
from support import MESHES, twisted_mesh


@pytest.mark.parametrize("grid", [(4, 4, 4), (5, 4, 3), (7, 2, 1), (9, 3, 6)], ids=lambda g: "x".join(map(str, g)))
def test_a_turned_box_coarsens_as_the_box_does_and_interpolates_exactly(grid):
    """A uniform box listed as a file would list it, each element turned at random in its
    reference cube: its sheets are the box's layers, its parents those of the box's own
    coarsening (odd sides: one layer whole; a side of two layers is paired too), and the
    prolongations of its turned children reproduce a triquadratic velocity and a trilinear
    pressure at the fine nodes to round-off."""
    fine = twisted_mesh(grid=grid, jitter=0.0, seed=3, lengths=np.array(grid) / max(grid))  # cubes
    assert len(np.unique(element_sheets(fine.pressure_cells))) == sum(grid)
    c = coarsen(fine)
    layers = [np.bincount(split(n)[0]) if n > 2 else [n] for n in grid]  # children per coarse layer: the box's, but a
    children = np.einsum("i,j,k->ijk", *layers)  # side of 2 layers pairs them
    assert c.coarse.n_elements == children.size
    assert sorted(np.bincount(c.parent)) == sorted(children.ravel())
    assert len({tuple(r.ravel()) for r in c.rotation}) > 4  # children turned in many ways in their parents
    kinds, transfers = Transfers.of(c.code, c.rotation)
    P = transfers.table[kinds]
    f = lambda x: 1 + x[:, 0] ** 2 - 2 * x[:, 1] * x[:, 2] + 0.5 * x[:, 2] ** 2 + x[:, 0] * x[:, 1] * x[:, 2]  # noqa: E731
    g = lambda x: 1 + x[:, 0] - 2 * x[:, 1] + 3 * x[:, 2] + x[:, 0] * x[:, 1] * x[:, 2]  # noqa: E731
    cm = c.coarse
    velocity = np.einsum("eij,ej->ei", P[:, :27, :27], f(cm.points)[cm.cells[c.parent]])
    pressure = np.einsum("eij,ej->ei", P[:, 81:, 81:], g(cm.points)[cm.pressure_nodes][cm.pressure_cells[c.parent]])
    assert np.abs(velocity - f(fine.points)[fine.cells]).max() < 1e-13
    assert np.abs(pressure - g(fine.points[fine.pressure_nodes])[fine.pressure_cells]).max() < 1e-13


def test_the_dfg_channel_coarsens_level_by_level():
    """The DFG channel's O-grid around the cylinder, upstream and downstream blocks (624
    hexahedra, 6 layers): each level's parents are whole (children's shares of the parent
    add up to one) and conforming, so the next coarsening takes the coarse mesh again; the
    hierarchy stops once a level has at most 5,000 unknowns."""
    mesh = read_mesh(os.path.join(MESHES, "dfg3d", "channel_coarse.msh"))
    sizes, level = [mesh.n_elements], mesh
    while (c := level.coarsening) is not None:
        share = np.bincount(c.parent, np.prod(child_boxes(c.code)[0], axis=1), minlength=c.coarse.n_elements)
        assert np.allclose(share, 1.0) and c.coarse.n_dofs < level.n_dofs
        sizes.append(c.coarse.n_elements)
        level = c.coarse
    assert sizes[:3] == [624, 228, 90], sizes  # the cells up to 3.8 times longer than wide: semi-coarsened first
    assert coarse_levels(mesh) == 2 and coarsest_size(mesh)[0] == 90 and coarsest_size(mesh)[1] <= 5000 < mesh.n_dofs


def test_meshes_whose_sheets_do_not_pair_have_no_coarsening():
    """One element, and a column of elements each turned (sheets along the column pair, so
    it coarsens; across it every sheet is the whole column and stays)."""
    assert coarsen(twisted_mesh(1, jitter=0.0)) is None
    column = coarsen(twisted_mesh(grid=(1, 1, 4), jitter=0.0, seed=1))
    halves = [sum(a != 2 for a in (c % 3, c // 3 % 3, c // 9)) for c in column.code]  # along one of the parent's axes
    assert column.coarse.n_elements == 2 and halves == [1] * 4
