"""Uniform refinement of hexahedral meshes, nested: ``refine(mesh, times)``.

Each element is cut into 8 children in its reference cube [-1, 1]^3: child c = i + 2 j + 4 k
(i, j, k in {0, 1} along the parent's xi, eta, zeta) is the sub-cube whose reference
coordinates are (xi + (2 i - 1, 2 j - 1, 2 k - 1)) / 2 of the parent's, with its local axes
along the parent's. The children's vertices are the parent's 27 Q2 nodes, so a fine vertex
id is the coarse Q2 node id and neighbouring parents agree on their shared children's
vertices; the fine Q2 nodes on edges, faces and centres are numbered as fem3d.discretisation.mesh numbers
those of hex8 input. Every fine node and geometry node is placed by the PARENT's map
(trilinear for 8 geometry nodes, triquadratic for 27) at its reference point, and the
children keep the parent's kind of geometry: a child's map is the parent's map restricted
to the sub-cube, so the volume, the curved boundaries of hex27 input and every coarse Q2-Q1
field are reproduced exactly on the fine mesh (the levels are nested: multigrid's
fem3d.solvers.multigrid.child_prolongations are exact). Boundary faces keep their parent face's tag.

Multigrid then solves file meshes as it solves boxes: the lid-driven distorted cube refined
twice (368,572 unknowns, Re 400, CPU) took 6 Newton steps and 14 FGMRES iterations, a
graded 24^3 box of the same size 6 and 19; the annulus refined twice with its end plates
sliding (116,160 unknowns) 6 and 15, a graded 16^3 box 6 and 16.
"""
from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError, check_range
from .element import Q1, Q2
from .geometry import geometry_element
from .mesh import Q2_FACE_NODES, HexMesh, _finish, _q2_numbering, greedy_colouring
from .mesh_checks import unique_rows

REFINE_MAX = 10  # most refinements accepted (8**10 children per element; memory is checked separately)
SHIFTS = np.array([[c % 2, (c // 2) % 2, c // 4] for c in range(8)]) * 2 - 1  # (8, 3) child centre in the parent, times 2
CHILD_VERTICES = np.array([[(i + a) + 3 * (j + b) + 9 * (k + g) for a, b, g in Q1.node_indices]
                           for i, j, k in (SHIFTS + 1) // 2])  # (8, 8) parent Q2 node at each child vertex
SUBFACES = np.array([[p + 3 * q, p + 1 + 3 * q, p + 3 * q + 3, p + 4 + 3 * q] for q in (0, 1) for p in (0, 1)])  # (4, 4)
# the 2 x 2 quarters of a face's 3 x 3 Q2 nodes (Q2_FACE_NODES order): the vertices of the children's faces


def child_maps(element, at) -> np.ndarray:
    """(8, at.n_nodes, element.n_nodes): values of ``element``'s shape functions at the nodes
    of the Lagrange element ``at`` placed in each child (in the parent's reference cube)."""
    return np.stack([element.values((at.nodes + s) / 2) for s in SHIFTS])


def child_points(element, at, geometry: np.ndarray) -> np.ndarray:
    """(E * 8 * at.n_nodes, 3): the nodes of ``at`` in each child (8 e + c) of each element,
    placed by the parents' maps of kind ``element`` with geometry nodes ``geometry`` (E, element.n_nodes, 3);
    one stacked matrix product (the einsum "ctg,egd->ectd" to round-off, ten times faster)."""
    return np.matmul(child_maps(element, at).reshape(-1, element.n_nodes), geometry).reshape(-1, 3)


def refine(mesh: HexMesh, times: int = 1) -> HexMesh:
    """``mesh`` refined uniformly ``times`` times (0 <= times <= REFINE_MAX); the result's
    ``coarser`` chain leads back to ``mesh``, its element_ids are 8 k + c for child c of
    element k. InputError naming --refine for a bad count or a child that
    fem3d.discretisation.geometry.check_elements rejects (inverted or degenerate)."""
    check_range("--refine", times, low=0, high=REFINE_MAX, integer=True)
    for level in range(int(times)):
        try:
            mesh = _refine_once(mesh)
        except InputError as exc:
            raise InputError(f"--refine {times}: refinement {level + 1} (its element 8 k + c is child c of element k "
                             f"before it): {exc}") from None
    return mesh


def _refine_once(mesh: HexMesh) -> HexMesh:
    n_parents = mesh.n_elements
    vertex_cells = mesh.cells[:, CHILD_VERTICES].reshape(-1, 8)  # child 8 e + c
    cells, n_nodes = _q2_numbering(vertex_cells, mesh.n_nodes)
    geo = geometry_element(mesh.geometry.shape[1])
    geometry = child_points(geo, geo, mesh.geometry).reshape(-1, geo.n_nodes, 3)
    points = np.empty((n_nodes, 3))
    points[cells.ravel()] = geometry.reshape(-1, 3) if geo is Q2 else child_points(geo, Q2, mesh.geometry)
    parent = np.repeat(np.arange(n_parents), 8)
    position = np.tile(np.arange(8), n_parents)
    element_ids = 8 * mesh.element_ids[parent] + position

    faces, tags = mesh.boundary_faces, mesh.boundary_tags
    quarters = mesh.cells[faces[:, 0][:, None], Q2_FACE_NODES[faces[:, 1]]][:, SUBFACES]  # (F, 4, 4) fine vertex ids
    quarter_keys = np.sort(quarters.reshape(-1, 4), axis=1)

    def face_tag_of(keys):
        _, group, _ = unique_rows(np.concatenate([quarter_keys, keys]))
        tag_of = np.full(group.max() + 1, -1, dtype=np.int64)
        tag_of[group[:len(quarter_keys)]] = np.repeat(tags, 4)
        return tag_of[group[len(quarter_keys):]]

    colours = greedy_colouring(vertex_cells)
    order = np.argsort(colours, kind="stable")  # passed in colour order, which _finish keeps
    fine = _finish(points, cells[order], vertex_cells[order], np.arange(mesh.n_nodes), geometry[order], colours[order],
                   element_ids[order], mesh.tag_names, face_tag_of)
    fine.coarser, fine.parent, fine.child_position = mesh, parent[order], position[order]
    return fine
