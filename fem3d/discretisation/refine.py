"""Uniform refinement of hexahedral meshes, nested: ``refine(mesh, times)``.

Each element is cut into 8 children in its reference cube [-1, 1]^3: child c = i + 2 j + 4 k
(i, j, k in {0, 1} along the parent's xi, eta, zeta) is the sub-cube whose reference
coordinates are (xi + (2 i - 1, 2 j - 1, 2 k - 1)) / 2 of the parent's, with its local axes
along the parent's. The fine Q2 nodes of a parent form a 5 x 5 x 5 lattice (LATTICE): at even
lattice positions the parent's 27 Q2 nodes, so a fine vertex id is the coarse Q2 node id; the
others are new. A new node inside the parent belongs to it alone and is numbered parent by
parent; one on a parent's face or edge, which the neighbours share, is named by two coarse
Q2 nodes whatever the parents' orientations: the corner of its lattice cell nearest the
parent's centre (a face centre or an edge midpoint) and the opposite one, and numbered by one
sort of those pairs. Every fine node and geometry node is placed by the PARENT's map
(trilinear for 8 geometry nodes, triquadratic for 27) at its reference point, and the
children keep the parent's kind of geometry: a child's map is the parent's map restricted
to the sub-cube, so the volume, the curved boundaries of hex27 input and every coarse Q2-Q1
field are reproduced exactly on the fine mesh (the levels are nested: multigrid's
fem3d.solvers.multigrid.child_prolongations are exact). A parent's boundary face gives the faces of its four
children on it, with its tag.

Multigrid then solves file meshes as it solves boxes: the lid-driven distorted cube refined
twice (368,572 unknowns, Re 400, CPU) took 6 Newton steps and 14 FGMRES iterations, a
graded 24^3 box of the same size 6 and 19; the annulus refined twice with its end plates
sliding (116,160 unknowns) 6 and 15, a graded 16^3 box 6 and 16.
"""

from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError, check_range
from .element import FACES, Q1, Q2
from .geometry import geometry_element
from .mesh import HexMesh, _finish, greedy_colouring
from .mesh_checks import unique_rows

REFINE_MAX = 10  # most refinements accepted (8**10 children per element; memory is checked separately)
SHIFTS = (
    np.array([[c % 2, (c // 2) % 2, c // 4] for c in range(8)]) * 2 - 1
)  # (8, 3) child centre in the parent, times 2
CHILD_VERTICES = np.array(
    [[(i + a) + 3 * (j + b) + 9 * (k + g) for a, b, g in Q1.node_indices] for i, j, k in (SHIFTS + 1) // 2]
)  # (8, 8) parent Q2 node at each child vertex
LATTICE = np.stack(np.meshgrid(*[np.arange(5)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)[
    :, ::-1
]  # (125, 3) a parent's
# fine Q2 nodes (x, y, z) in 0..4 along its xi, eta, zeta, lattice point x + 5 y + 25 z
CHILD_LATTICE = np.array(
    [[(2 * i + a) + 5 * (2 * j + b) + 25 * (2 * k + c) for a, b, c in Q2.node_indices] for i, j, k in (SHIFTS + 1) // 2]
)  # (8, 27) lattice point of each child's Q2 node


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
    element k. InputError naming --refine for a bad count. The children need no check of their
    own: each child's map is a part of its parent's, whose Jacobian determinant was proved
    positive over the whole element (fem3d.discretisation.geometry.check_elements)."""
    check_range("--refine", times, low=0, high=REFINE_MAX, integer=True)
    for level in range(int(times)):
        try:
            mesh = _refine_once(mesh)
        except InputError as exc:
            raise InputError(
                f"--refine {times}: refinement {level + 1} (its element 8 k + c is child c of element k "
                f"before it): {exc}"
            ) from None
    return mesh


def _tensor(abc) -> np.ndarray:
    """Q2 tensor node numbers of 1D indices (..., 3) in 0..2."""
    return abc[..., 0] + 3 * abc[..., 1] + 9 * abc[..., 2]


_ODD = LATTICE % 2 == 1
_KEPT = np.flatnonzero(~_ODD.any(axis=1))  # (27,) the parent's Q2 nodes
_SHARED = np.flatnonzero(
    _ODD.any(axis=1) & (LATTICE % 4 == 0).any(axis=1)
)  # (72,) new, on the parent's faces and edges
_INSIDE = np.flatnonzero(_ODD.any(axis=1) & ~(LATTICE % 4 == 0).any(axis=1))  # (26,) new, inside the parent
_NEAR = _tensor(np.where(_ODD, 2, LATTICE)[_SHARED] // 2)  # the lattice cell's corner nearest the parent's centre
_FAR = _tensor(np.where(_ODD, np.where(LATTICE == 1, 0, 4), LATTICE)[_SHARED] // 2)  # and the opposite corner


def _fine_nodes(cells: np.ndarray, n_nodes: int) -> tuple[np.ndarray, int]:
    """(ids (E, 125) of each parent's fine lattice (LATTICE order), the fine mesh's node count)
    of parents with Q2 nodes ``cells`` (E, 27) among ``n_nodes``: the coarse nodes keep their
    ids, then the shared new nodes (one sort of their pairs of coarse nodes), then the new nodes
    inside each parent, parent by parent."""
    n = len(cells)
    ids = np.empty((n, len(LATTICE)), dtype=np.int64)
    ids[:, _KEPT] = cells[:, _tensor(LATTICE[_KEPT] // 2)]
    pairs = np.sort(np.stack([cells[:, _NEAR], cells[:, _FAR]], axis=-1), axis=-1).reshape(-1, 2)
    _, shared, counts = unique_rows(pairs)
    ids[:, _SHARED] = n_nodes + shared.reshape(n, -1)
    ids[:, _INSIDE] = n_nodes + len(counts) + np.arange(n * len(_INSIDE)).reshape(n, -1)
    return ids, n_nodes + len(counts) + n * len(_INSIDE)


def _child_faces(mesh: HexMesh) -> tuple[np.ndarray, np.ndarray]:
    """(boundary faces (4 F, 2): child 8 e + c and its face, their tags): the four children
    of each parent's boundary face on it, with its tag (a child's faces lie along its parent's)."""
    faces, tags = mesh.boundary_faces, mesh.boundary_tags
    axis, side = np.array([FACES[f] for f in range(6)]).T
    on_face = np.array([[c for c in range(8) if (SHIFTS[c, axis[f]] > 0) == bool(side[f])] for f in range(6)])  # (6, 4)
    children = 8 * faces[:, :1] + on_face[faces[:, 1]]
    return np.stack([children.ravel(), np.repeat(faces[:, 1], 4)], axis=1), np.repeat(tags, 4)


def _refine_once(mesh: HexMesh) -> HexMesh:
    lattice, n_nodes = _fine_nodes(mesh.cells, mesh.n_nodes)
    cells = lattice[:, CHILD_LATTICE].reshape(-1, 27)  # child 8 e + c
    vertex_cells = mesh.cells[:, CHILD_VERTICES].reshape(-1, 8)
    geo = geometry_element(mesh.geometry.shape[1])
    geometry = child_points(geo, geo, mesh.geometry).reshape(-1, geo.n_nodes, 3)
    points = np.empty((n_nodes, 3))
    points[lattice.ravel()] = np.matmul(geo.values(LATTICE / 2 - 1), mesh.geometry).reshape(-1, 3)
    element_ids = (8 * mesh.element_ids[:, None] + np.arange(8)).ravel()  # child 8 e + c
    fine = _finish(
        points,
        cells,
        vertex_cells,
        np.arange(mesh.n_nodes),
        geometry,
        greedy_colouring(vertex_cells),
        element_ids,
        mesh.tag_names,
        faces=_child_faces(mesh),
        check_geometry=False,  # a child's map is part of its parent's, valid everywhere (geometry.check_elements)
    )  # the children put in colour order
    fine.coarser, fine.parent, fine.child_position = (
        mesh,
        mesh.elements_with_ids(fine.element_ids // 8),
        fine.element_ids % 8,
    )
    return fine
