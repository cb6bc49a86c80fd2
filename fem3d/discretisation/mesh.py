"""Q2-Q1 hexahedral meshes: node numbering, boundary faces and tags, element colouring.

A :class:`HexMesh` holds the 27 velocity (Q2) nodes and 8 pressure (Q1, vertex)
nodes of every element in tensor order (see fem3d.discretisation.element). Elements are stored
colour by colour: no two elements of one colour share a node, so element
contributions of one colour can be scattered into a global vector without races.

Meshes come from :func:`box_mesh` (structured, optionally graded toward the walls,
8 colours by parity) or :func:`read_mesh` (any hexahedron/hexahedron27 mesh that
meshio reads; Q2 nodes are created on edges, faces and cell centres for hex8
input; colours by greedy colouring). Meshes other than boxes are checked
(fem3d.discretisation.mesh_checks): coincident nodes of a file are merged, and broken meshes
(duplicated elements, cracks, several parts, inverted elements) are input errors.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gpucfd.sets import distinct
from gpucfd.backend import einsum
from .element import Q1, Q2, face_nodes
from gpucfd.errors import InputError
from .geometry import check_elements
from .mesh_checks import check_elements_distinct, check_faces, check_points, coincident_nodes, unique_rows

# VTK/meshio node order -> tensor order (tensor node t is VTK node ORDER[t]).
VTK_HEX8_TO_TENSOR = np.array([0, 1, 3, 2, 4, 5, 7, 6])
_VTK27_ABC = [
    (0, 0, 0),
    (2, 0, 0),
    (2, 2, 0),
    (0, 2, 0),
    (0, 0, 2),
    (2, 0, 2),
    (2, 2, 2),
    (0, 2, 2),
    (1, 0, 0),
    (2, 1, 0),
    (1, 2, 0),
    (0, 1, 0),
    (1, 0, 2),
    (2, 1, 2),
    (1, 2, 2),
    (0, 1, 2),
    (0, 0, 1),
    (2, 0, 1),
    (2, 2, 1),
    (0, 2, 1),
    (0, 1, 1),
    (2, 1, 1),
    (1, 0, 1),
    (1, 2, 1),
    (1, 1, 0),
    (1, 1, 2),
    (1, 1, 1),
]
TENSOR27_TO_VTK = np.array(
    [a + 3 * b + 9 * c for a, b, c in _VTK27_ABC]
)  # VTK node k is tensor node TENSOR27_TO_VTK[k]
VTK_HEX27_TO_TENSOR = np.argsort(TENSOR27_TO_VTK)

Q2_FACE_NODES = face_nodes(Q2)  # (6, 9)
AXIS_EDGES = np.array([[(v, v | 1 << d) for v in range(8) if not v >> d & 1] for d in range(3)])  # (3, 4, 2) Q1
# vertices of the four edges along each reference axis (vertex i + 2 j + 4 k: bit d is the side along axis d)
Q1_FACE_NODES = face_nodes(Q1)  # (6, 4)
BOX_TAGS = {"x0": 0, "x1": 1, "y0": 2, "y1": 3, "z0": 4, "z1": 5}
TAG_FIELDS = ("gmsh:physical", "boundary", "tag")  # cell data searched for boundary tags, in order
CHUNK = 1 << 18  # elements or nodes per piece where an answer about a whole mesh is computed piece by piece
SOLID_CELLS = ("tetra", "hexahedron", "wedge", "pyramid", "polyhedron")  # meshio 3D cell type prefixes


@dataclass
class HexMesh:
    """Q2-Q1 hexahedral mesh (arrays on the host).

    points          (n_nodes, 3)  coordinates of the Q2 velocity nodes
    cells           (E, 27) int64 Q2 node ids of each element, tensor order
    pressure_cells  (E, 8) int64  pressure node ids of each element, tensor order
    pressure_nodes  (n_p,) int64  Q2 node id at each pressure node (a vertex)
    geometry        (E, 8|27, 3)  geometry nodes of each element, tensor order
    colour_offsets  (n_colours+1,) colour c is elements colour_offsets[c]:colour_offsets[c+1]
    element_ids     (E,) int64    element number in the generator or input file
    boundary_faces  (F, 2) int64  (element, local face 0..5 in FACES order) of each boundary face
    boundary_tags   (F,) int64    tag of each boundary face, -1 if untagged
    tag_names       name -> tag
    grid            (nx, ny, nz) of the structured box this mesh is (a part of, on one
                    rank), whose element_ids are i + nx (j + ny k); None for other meshes
    merged_nodes    coincident nodes of the file merged by read_mesh
    coarser         the mesh this one refines (fem3d.discretisation.refine), else None
    parent          (E,) int64 element of ``coarser`` (its element order) each element lies in
    child_position  (E,) int64 position c = i + 2 j + 4 k of each element in its parent, i, j, k
                    in {0, 1} along the parent's reference axes xi, eta, zeta
    whole           the whole mesh of which this is one rank's part (fem3d.parallel.partition.submesh),
                    else None
    """

    points: np.ndarray
    cells: np.ndarray
    pressure_cells: np.ndarray
    pressure_nodes: np.ndarray
    geometry: np.ndarray
    colour_offsets: np.ndarray
    element_ids: np.ndarray
    boundary_faces: np.ndarray
    boundary_tags: np.ndarray
    tag_names: dict = field(default_factory=dict)
    grid: tuple | None = None
    merged_nodes: int = 0
    coarser: HexMesh | None = None
    parent: np.ndarray | None = None
    child_position: np.ndarray | None = None
    whole: HexMesh | None = None

    @property
    def n_elements(self) -> int:
        return self.cells.shape[0]

    @property
    def n_nodes(self) -> int:
        return self.points.shape[0]

    @property
    def n_pressure(self) -> int:
        return self.pressure_nodes.shape[0]

    @property
    def n_dofs(self) -> int:
        """Unknowns in the global vector [u | v | w | p]."""
        return 3 * self.n_nodes + self.n_pressure

    @property
    def n_colours(self) -> int:
        return len(self.colour_offsets) - 1

    @property
    def n_geometry(self) -> int:
        """Geometry nodes per element: 8 (trilinear map) or 27 (triquadratic)."""
        return self.geometry.shape[1]

    def dofs(self, elements=None) -> np.ndarray:
        """(E, 89) int64 global unknown of each local unknown (27 u, 27 v, 27 w, 8 p) of every
        element, or (m, 89) of the ``elements`` (m,) (indices or a slice): :func:`element_dofs`."""
        cells = self.cells if elements is None else self.cells[elements]
        pressure = self.pressure_cells if elements is None else self.pressure_cells[elements]
        return element_dofs(np, cells, pressure, self.n_nodes)

    def cells_of(self, elements) -> np.ndarray:
        """(m, 27) int64 the Q2 nodes of ``elements`` (m,) (indices or a slice)."""
        return self.cells[elements]

    def pressure_cells_of(self, elements) -> np.ndarray:
        """(m, 8) int64 the pressure nodes of ``elements`` (m,)."""
        return self.pressure_cells[elements]

    def geometry_of(self, elements) -> np.ndarray:
        """(m, 8|27, 3) the geometry nodes of ``elements`` (m,)."""
        return self.geometry[elements]

    def points_of(self, nodes) -> np.ndarray:
        """(..., 3) the coordinates of the Q2 nodes ``nodes`` (any shape)."""
        return self.points[nodes]

    def vertices_of(self, elements) -> np.ndarray:
        """(m, 8, 3) the coordinates of the vertices of ``elements`` (m,) (indices or a slice), tensor order."""
        return self.points_of(self.pressure_nodes[self.pressure_cells_of(elements)])

    def face_nodes_of(self, faces: np.ndarray) -> np.ndarray:
        """(F, 9) int64 the Q2 nodes of the faces ``faces`` (F, 2) (element, local face in FACES order)."""
        faces = np.asarray(faces, dtype=np.int64).reshape(-1, 2)
        return self.cells_of(faces[:, 0])[np.arange(len(faces))[:, None], Q2_FACE_NODES[faces[:, 1]]]

    def tag_ids(self, tags) -> np.ndarray:
        """Tag numbers of ``tags`` (names or ints); InputError for an unknown name."""
        out = []
        for t in tags:
            if isinstance(t, str):
                if t not in self.tag_names:
                    known = ", ".join(sorted(self.tag_names)) or "none"
                    raise InputError(f"boundary tag {t!r} not in the mesh (tags: {known})")
                out.append(self.tag_names[t])
            else:
                out.append(int(t))
        return np.array(out, dtype=np.int64)

    def boundary_nodes(self, tags=None) -> np.ndarray:
        """Sorted Q2 node ids on boundary faces with the given tags (all boundary faces if None)."""
        faces = self.boundary_faces
        if tags is not None:
            faces = faces[np.isin(self.boundary_tags, self.tag_ids(tags))]
        return distinct(self.face_nodes_of(faces))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo (3,), hi (3,)): the bounding box of the Q2 nodes (new arrays at each call)."""
        lo, hi = self._bounds
        return lo.copy(), hi.copy()

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The bounding box, found at the first call of bounds() (0.1 s at 112^3; a coordinate
        at a time: seven times faster than points.min(axis=0) on the (n, 3) array)."""
        return tuple(np.array([f(self.points[:, d]) for d in range(3)]) for f in (np.min, np.max))

    @cached_property
    def box_vertices(self) -> list | None:
        """[(nx + 1,), (ny + 1,), (nz + 1,)] the vertex coordinates along each axis of a whole
        structured box (element layer i spans vertices i and i + 1, read from each element's
        lowest and highest vertex), None for another mesh or a part of a box."""
        if self.grid is None or self.n_elements != int(np.prod(self.grid)):
            return None
        corners = self.geometry[:, [0, -1]]
        out = []
        for d, layer in enumerate(grid_index(self.element_ids, self.grid)):
            v = np.empty(self.grid[d] + 1)
            v[layer], v[layer + 1] = corners[:, 0, d], corners[:, 1, d]
            out.append(v)
        return out

    def elements_with_ids(self, ids) -> np.ndarray:
        """The elements whose ``element_ids`` are ``ids`` (a whole box's ids are its box numbers
        i + nx (j + ny k); a refined mesh's 8 e + c of parent id e)."""
        return self._element_of_id[ids]

    @cached_property
    def _element_of_id(self) -> np.ndarray:
        """(largest id + 1,) int64 the element of each element id, made at the first use
        (mesh sequencing asks it chunk by chunk)."""
        index = np.empty(int(self.element_ids.max()) + 1 if self.n_elements else 0, dtype=np.int64)
        index[self.element_ids] = np.arange(self.n_elements)
        return index

    @cached_property
    def centre_tree(self):
        """scipy cKDTree of the element centres (means of the geometry nodes), built at the first use."""
        from scipy.spatial import cKDTree

        return cKDTree(self.geometry.mean(axis=1))

    @cached_property
    def located(self) -> dict:
        """Point sets located on this mesh, by their float64 bytes: (elem, xi) of each as
        fem3d.discretisation.fields.locate gives them (filled by
        fem3d.problems.quantities.point_values: a run in time reads its probes every step)."""
        return {}

    @cached_property
    def axis_lengths(self) -> np.ndarray:
        """(E, 3) each element's length along each reference axis: the mean length of its four
        straight edges (between vertices) along that axis; found at the first use (on a whole
        box from its vertex coordinates along each axis: the same numbers, without the (E, 8, 3)
        and (E, 3, 4, 3) arrays of the vertices and edges)."""
        if self.box_vertices is not None:
            layers = grid_index(self.element_ids, self.grid)
            return np.stack([np.diff(v)[layer] for v, layer in zip(self.box_vertices, layers)], axis=1)
        return np.concatenate(
            [_axis_lengths(self.vertices_of(slice(a, a + CHUNK))) for a in range(0, self.n_elements, CHUNK)]
        )

    @cached_property
    def stretches(self) -> np.ndarray:
        """(E,) each element's longest over its shortest length along its reference axes
        (:attr:`axis_lengths`); found at the first use."""
        lengths = self.axis_lengths
        return lengths.max(axis=1) / lengths.min(axis=1)

    @cached_property
    def coarsening(self):
        """The next coarser level of this whole mesh by pairing its sheets
        (fem3d.discretisation.coarsen.Coarsening), made at the first use; None where no sheet pairs."""
        from .coarsen import coarsen

        return coarsen(self)

    def node_valence(self) -> np.ndarray:
        """(n_nodes,) number of elements containing each Q2 node."""
        return np.bincount(self.cells.ravel(), minlength=self.n_nodes)

    def refined(self, times: int = 1) -> "HexMesh":
        """This mesh refined uniformly ``times`` times, nested (fem3d.discretisation.refine.refine)."""
        from .refine import refine

        return refine(self, times)

    def dof_valence(self) -> np.ndarray:
        """(n_dofs,) float64 number of elements holding each unknown (np.bincount(dofs().ravel()),
        from the nodes' counts: a third of the indices)."""
        velocity = self.node_valence()
        return np.concatenate(
            [velocity, velocity, velocity, np.bincount(self.pressure_cells.ravel(), minlength=self.n_pressure)]
        ).astype(np.float64)

    def colour_is_race_free(self) -> bool:
        """True when no two elements of one colour share a Q2 node."""
        for c in range(self.n_colours):
            nodes = self.cells[self.colour_offsets[c] : self.colour_offsets[c + 1]].ravel()
            if distinct(nodes).size != nodes.size:
                return False
        return True


def _axis_lengths(vertices: np.ndarray) -> np.ndarray:
    """(m, 3) the mean length of the four edges along each reference axis of hexahedra with
    ``vertices`` (m, 8, 3)."""
    edges = vertices[:, AXIS_EDGES[:, :, 1]] - vertices[:, AXIS_EDGES[:, :, 0]]  # (m, 3, 4, 3)
    return np.sqrt((edges * edges).sum(axis=3)).mean(axis=2)


def face_keys(pressure_cells: np.ndarray) -> np.ndarray:
    """(E*6, 4) sorted vertex ids of the faces of the elements ``pressure_cells`` (E, 8);
    element e's faces (FACES order) are rows 6e..6e+5."""
    return np.sort(pressure_cells[:, Q1_FACE_NODES], axis=2).reshape(-1, 4)


def _finish(
    points,
    cells,
    pressure_cells,
    pressure_nodes,
    geometry,
    colours,
    element_ids,
    tag_names,
    face_tag_of=None,
    grid=None,
    check_topology=False,
    check_geometry=True,
    boundary=None,
    n_colours=None,
):
    """Sort elements by colour, find boundary faces, check the geometry, build the HexMesh.

    Boundary faces are the faces of one element, found by matching the faces' vertex keys;
    ``face_tag_of(face_vertex_keys)`` maps (F, 4) sorted vertex ids of boundary faces to
    tags (-1 untagged). A box gives them instead: ``boundary`` (E, 6) bool, the boundary
    faces of each element (input order), each tagged by its face number (FACES order, as
    BOX_TAGS). ``check_topology``: also reject faces of three elements, cracks and meshes in
    several parts (fem3d.discretisation.mesh_checks.check_faces). ``check_geometry=False``
    skips the Jacobians (check_elements) where the caller knows every element's map is valid.
    ``n_colours``: at least this many colours (some of them empty: a part of a mesh).
    """
    if check_geometry:
        check_elements(geometry, element_ids)
    counts = np.bincount(colours, minlength=max(int(colours.max()) + 1, n_colours or 0))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if (np.diff(colours) < 0).any():  # not yet in colour order
        order = np.argsort(colours, kind="stable")
        cells, pressure_cells, geometry, element_ids = (
            cells[order],
            pressure_cells[order],
            geometry[order],
            element_ids[order],
        )
        boundary = None if boundary is None else boundary[order]

    if boundary is None:
        keys = face_keys(pressure_cells)
        _, inverse, counts = unique_rows(keys)
        if check_topology:
            check_faces(keys, inverse, counts, points[pressure_nodes], element_ids)
        idx = np.flatnonzero(counts[inverse] == 1)
        tags = face_tag_of(keys[idx]).astype(np.int64)
    else:
        idx = np.flatnonzero(boundary)
        tags = idx % 6
    boundary_faces = np.stack([idx // 6, idx % 6], axis=1).astype(np.int64)
    return HexMesh(
        points=np.ascontiguousarray(points, dtype=np.float64),
        cells=np.ascontiguousarray(cells, dtype=np.int64),
        pressure_cells=np.ascontiguousarray(pressure_cells, dtype=np.int64),
        pressure_nodes=np.asarray(pressure_nodes, dtype=np.int64),
        geometry=np.ascontiguousarray(geometry, dtype=np.float64),
        colour_offsets=offsets,
        element_ids=element_ids.astype(np.int64),
        boundary_faces=boundary_faces,
        boundary_tags=tags,
        tag_names=dict(tag_names),
        grid=grid,
    )


def graded_coordinates(n: int, length: float, grading: float) -> np.ndarray:
    """n+1 vertex coordinates on [0, length], clustered toward both ends.

    grading = 0 gives uniform spacing; grading = beta > 0 uses the tanh map
    x(s) = L/2 (1 + tanh(beta (2s - 1)) / tanh(beta)), so the wall cells shrink as beta grows.
    """
    s = np.linspace(0.0, 1.0, n + 1)
    if grading == 0:
        return length * s
    return 0.5 * length * (1.0 + np.tanh(grading * (2.0 * s - 1.0)) / np.tanh(grading))


def element_dofs(xp, cells, pressure_cells, n_nodes: int, dtype=np.int64):
    """(m, 89) array of ``xp`` (NumPy or CuPy) of ``dtype``: the global unknowns of each local
    unknown (27 u, 27 v, 27 w, 8 p) of the elements whose Q2 nodes are ``cells`` (m, 27) and
    pressure nodes ``pressure_cells`` (m, 8) in a mesh of ``n_nodes`` Q2 nodes (layout
    [u | v | w | p]). Given device arrays, made on the device: a system's 35 indices per
    element are uploaded, not 89."""
    out = xp.empty((cells.shape[0], 89), dtype=dtype)
    for d in range(3):
        xp.add(cells, d * n_nodes, out=out[:, 27 * d : 27 * d + 27])
    xp.add(pressure_cells, 3 * n_nodes, out=out[:, 81:])
    return out


def box_mesh(
    nx: int,
    ny: int | None = None,
    nz: int | None = None,
    lengths=(1.0, 1.0, 1.0),
    origin=(0.0, 0.0, 0.0),
    grading=0.0,
    vertices=None,
) -> HexMesh:
    """Structured box of nx*ny*nz elements; tags x0, x1, y0, y1, z0, z1 on its faces.

    ``grading`` (a number or one per axis, >= 0) clusters elements toward the walls
    (see :func:`graded_coordinates`); ``vertices`` (three increasing arrays, (nx+1,),
    (ny+1,), (nz+1,)) gives the vertex coordinates in place of lengths, origin and grading.
    Elements are boxes (affine map); mid nodes sit at the midpoints. Colours: 8, by the
    parity of the element indices.
    """
    ny = nx if ny is None else ny
    nz = nx if nz is None else nz
    n = (nx, ny, nz)
    for name, v in zip(("nx", "ny", "nz"), n):
        if int(v) != v or v < 1:
            raise InputError(f"{name} must be an integer >= 1 (got {v!r})")
    n = tuple(int(v) for v in n)
    grading = np.broadcast_to(np.asarray(grading, dtype=float), (3,))
    if (grading < 0).any() or not np.isfinite(grading).all():
        raise InputError(f"grading must be >= 0 (got {grading.tolist()})")
    lengths = np.asarray(lengths, dtype=float)
    if (lengths <= 0).any():
        raise InputError(f"box lengths must be > 0 (got {lengths.tolist()})")
    vert = (
        [origin[d] + graded_coordinates(n[d], lengths[d], grading[d]) for d in range(3)]
        if vertices is None
        else [np.asarray(v, dtype=float) for v in vertices]
    )
    for d, v in enumerate(
        vert
    ):  # increasing coordinates: every element is a box of positive volume (no Jacobians to check)
        if v.shape != (n[d] + 1,) or not (np.isfinite(v).all() and (np.diff(v) > 0).all()):
            raise InputError(f"box vertices along {'xyz'[d]} must be {n[d] + 1} increasing finite numbers")
    return Box(n, [v.copy() for v in vert])


class LazyMesh(HexMesh):
    """A whole mesh known by what it is made from, whose arrays (points, cells, pressure_cells,
    pressure_nodes, geometry) are made at their first use (:attr:`built`, by ``_arrays()``)
    and from then on answer (a caller may change them); until then its counts, element
    order, boundary faces (``_boundary``: faces and tags) and the accessors (cells_of,
    pressure_cells_of, geometry_of, vertices_of, points_of) are computed from what it is made
    from (by ``_cells_from``, ``_pressure_cells_from``, ``_geometry_from``, ``_vertices_from``,
    ``_points_from``), so that under MPI each rank builds its part alone
    (fem3d.parallel.partition.distribute). ``dataclasses.replace`` of one gives a HexMesh."""

    _ARRAYS = ("points", "cells", "pressure_cells", "pressure_nodes", "geometry")

    def __new__(cls, *args, **fields):
        if fields:  # dataclasses.replace(mesh, ...): the changed mesh is a HexMesh, no longer known by its making
            return HexMesh(**fields)
        return super().__new__(cls)

    def __getattr__(self, name):
        if name not in LazyMesh._ARRAYS:
            raise AttributeError(name)
        for field_name, array in zip(LazyMesh._ARRAYS, self._arrays()):
            self.__dict__[field_name] = array
        return self.__dict__[name]

    def _arrays(self) -> tuple:
        """The whole mesh's (points, cells, pressure_cells, pressure_nodes, geometry)."""
        raise NotImplementedError

    # once made, the arrays are the mesh (a caller may change them)
    def cells_of(self, elements) -> np.ndarray:
        return super().cells_of(elements) if self.built else self._cells_from(elements)

    def pressure_cells_of(self, elements) -> np.ndarray:
        return super().pressure_cells_of(elements) if self.built else self._pressure_cells_from(elements)

    def geometry_of(self, elements) -> np.ndarray:
        return super().geometry_of(elements) if self.built else self._geometry_from(elements)

    def vertices_of(self, elements) -> np.ndarray:
        return super().vertices_of(elements) if self.built else self._vertices_from(elements)

    def points_of(self, nodes) -> np.ndarray:
        return super().points_of(nodes) if self.built else self._points_from(nodes)

    @property
    def boundary_faces(self) -> np.ndarray:
        return self._boundary[0]

    @property
    def boundary_tags(self) -> np.ndarray:
        return self._boundary[1]

    @property
    def built(self) -> bool:
        """Whether the whole mesh's arrays have been made."""
        return "cells" in self.__dict__


class Box(LazyMesh):
    """A whole structured box (:func:`box_mesh`) known by its elements per side ``grid`` and
    its vertex coordinates ``box_vertices``: its counts, bounds, colours, element ids, boundary
    faces and the nodes, geometry and coordinates of any elements or nodes are computed from
    those; the arrays of the whole mesh are made at their first use (LazyMesh). Under MPI each
    rank builds its part from its slab alone (fem3d.parallel.partition.box_part) while the
    arrays are not made, and no rank's run needs them; made, they are cut
    (fem3d.parallel.partition.distribute)."""

    def __init__(self, grid, vertices):
        self.grid, self.box_vertices, self.tag_names = tuple(int(v) for v in grid), vertices, dict(BOX_TAGS)
        self.merged_nodes, self.coarser, self.parent, self.child_position, self.whole = 0, None, None, None, None

    def _arrays(self) -> tuple:
        whole = _box_block(self.grid, self.box_vertices, (0, 0, 0), self.grid)
        return tuple(getattr(whole, name) for name in LazyMesh._ARRAYS)

    def __repr__(self) -> str:  # the dataclass's would make and print every array
        lo, hi = self.bounds()
        return f"Box(grid={self.grid}, from {lo.tolist()} to {hi.tolist()}, built={self.built})"

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.grid))

    @property
    def n_nodes(self) -> int:
        return int(np.prod([2 * v + 1 for v in self.grid]))

    @property
    def n_pressure(self) -> int:
        return int(np.prod([v + 1 for v in self.grid]))

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([v[0] for v in self.box_vertices]), np.array([v[-1] for v in self.box_vertices])

    n_geometry = 8  # a box's elements are boxes: trilinear maps

    @cached_property
    def colour_offsets(self) -> np.ndarray:
        """(n_colours + 1,) int64 as _finish makes them: colour i % 2 + 2 (j % 2) + 4 (k % 2) of
        element (i, j, k), as many colours as the sides of more than one element allow."""
        n = np.array(self.grid)
        colours = 1 + (n[0] > 1) + 2 * (n[1] > 1) + 4 * (n[2] > 1)
        counts = [int(np.prod((n - [c & 1, (c >> 1) & 1, c >> 2] + 1) // 2)) for c in range(colours)]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @cached_property
    def element_ids(self) -> np.ndarray:
        """(E,) int64 the box number i + nx (j + ny k) of each element, in the box's element order."""
        return box_ids(self.grid, np.arange(self.n_elements))

    def _ids(self, elements) -> np.ndarray:
        """The box numbers of ``elements`` (indices or a slice), without the whole element_ids."""
        return box_ids(self.grid, np.arange(self.n_elements)[elements] if isinstance(elements, slice) else elements)

    def elements_with_ids(self, ids) -> np.ndarray:
        return box_order(self.grid, ids)

    @cached_property
    def _boundary(self) -> tuple[np.ndarray, np.ndarray]:
        """(boundary_faces (F, 2), boundary_tags (F,)) as _finish makes them, from the box
        numbers on the box's sides alone."""
        sides = []
        for d, m in enumerate(self.grid):
            for layer in (0, m - 1):
                at = [np.arange(v) for v in self.grid]
                at[d] = np.array([layer])
                sides.append(grid_block(at, self.grid).ravel())
        ids = distinct(np.concatenate(sides))
        flags = _box_elements(self.grid, self.box_vertices, ids)[2]  # (m, 6)
        element, face = np.nonzero(flags)
        idx = np.sort(6 * box_order(self.grid, ids)[element] + face)
        return np.stack([idx // 6, idx % 6], axis=1).astype(np.int64), idx % 6

    def _cells_from(self, elements) -> np.ndarray:
        return _box_cells(self.grid, self._ids(elements), (0, 0, 0), self.grid)[0]

    def _pressure_cells_from(self, elements) -> np.ndarray:
        return _box_cells(self.grid, self._ids(elements), (0, 0, 0), self.grid)[1]

    def _geometry_from(self, elements) -> np.ndarray:
        return _box_elements(self.grid, self.box_vertices, self._ids(elements))[0]

    _vertices_from = _geometry_from  # a box element's 8 geometry nodes are its vertices, in tensor order

    def _points_from(self, nodes) -> np.ndarray:
        index = grid_index(np.asarray(nodes, dtype=np.int64), [2 * v + 1 for v in self.grid])
        return np.stack([_with_midpoints(v)[i] for v, i in zip(self.box_vertices, index)], axis=-1)


def _colour_order(grid_ids, lo) -> np.ndarray:
    """The box numbers ``grid_ids`` (z, y, x) of a block of a box whose first element is
    (lo[0], lo[1], lo[2]), in the box's colour order: colour i % 2 + 2 (j % 2) + 4 (k % 2) of
    element (i, j, k), each colour by box number (slices: no sort)."""
    first = [[(((c >> d) & 1) - lo[d]) % 2 for d in range(3)] for c in range(8)]  # of each colour, along each axis
    return np.concatenate([grid_ids[f[2] :: 2, f[1] :: 2, f[0] :: 2].ravel() for f in first])


def _box_cells(n, ids, lo, hi):
    """(cells, pressure_cells) of the elements ``ids`` (box numbers) of the box of ``n``
    elements per side, numbering the nodes of its block of elements [lo[d], hi[d]) along each
    axis d (the whole box for lo 0 and hi n) in the box's order."""
    e = [i - a for i, a in zip(grid_index(ids, n), lo)]
    m = [2 * (b - a) + 1 for a, b in zip(lo, hi)]
    pm = [b - a + 1 for a, b in zip(lo, hi)]
    cells = _grid_id(2 * e[0], 2 * e[1], 2 * e[2], m)[:, None] + _grid_id(*Q2.node_indices.T, m)
    pressure_cells = _grid_id(*e, pm)[:, None] + _grid_id(*Q1.node_indices.T, pm)
    return cells, pressure_cells


def _box_elements(n, vert, ids):
    """(geometry, colours, boundary) of the elements ``ids`` (box numbers i + nx (j + ny k))
    of the box of ``n`` elements per side with vertex coordinates ``vert`` (three arrays):
    geometry (m, 8, 3), colours by the parity of (i, j, k) and the box faces each lies on
    (m, 6) (FACES order)."""
    nx, ny, nz = n
    ex, ey, ez = grid_index(ids, n)
    geometry = np.empty((len(ids), 8, 3))
    for d, (v, e) in enumerate(zip(vert, (ex, ey, ez))):
        upper = Q1.node_indices[:, d] == 1
        geometry[:, :, d] = np.where(upper, v[e + 1][:, None], v[e][:, None])
    colours = (ex % 2) + 2 * (ey % 2) + 4 * (ez % 2)
    boundary = np.stack([ex == 0, ex == nx - 1, ey == 0, ey == ny - 1, ez == 0, ez == nz - 1], axis=1)
    return geometry, colours, boundary


def box_order(grid, ids) -> np.ndarray:
    """(m,) the place of the box elements ``ids`` (box numbers) in box_mesh(*grid)'s element
    order (colour by colour, each colour by box number), found without the mesh."""
    n = np.asarray(grid, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    e = np.stack(grid_index(ids, n), axis=1)  # (m, 3)
    parity = e % 2
    count = (n[None, :] - parity + 1) // 2  # elements of each parity along each side
    sizes = [int(np.prod((n - p + 1) // 2)) for p in (np.array([c % 2, (c // 2) % 2, c // 4]) for c in range(8))]
    start = np.concatenate([[0], np.cumsum(sizes)])[parity[:, 0] + 2 * parity[:, 1] + 4 * parity[:, 2]]
    half = e // 2
    return start + half[:, 0] + count[:, 0] * (half[:, 1] + count[:, 1] * half[:, 2])


def box_block_ids(n, lo, hi) -> np.ndarray:
    """(m,) int64 the box numbers of the elements of the box of ``n`` elements per side whose
    indices lie in [lo[d], hi[d]) along each axis d, in the box's element order (colour by
    colour, each by box number)."""
    return _colour_order(grid_block([np.arange(a, b) for a, b in zip(lo, hi)], n), lo)


def box_ids(grid, order) -> np.ndarray:
    """(m,) int64 the box numbers i + nx (j + ny k) of the elements at the places ``order``
    (m,) of box_mesh(*grid)'s element order: the inverse of :func:`box_order`."""
    n = np.asarray(grid, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    parities = np.array([[c & 1, (c >> 1) & 1, c >> 2] for c in range(8)])
    counts = (n[None, :] - parities + 1) // 2  # (8, 3) elements of each colour along each axis
    start = np.concatenate([[0], np.cumsum(counts.prod(axis=1))])
    colour = np.searchsorted(start, order, side="right") - 1
    local, p, c = order - start[colour], parities[colour], counts[colour]
    half = np.stack([local % c[:, 0], (local // c[:, 0]) % c[:, 1], local // (c[:, 0] * c[:, 1])], axis=1)
    e = 2 * half + p
    return e[:, 0] + n[0] * (e[:, 1] + n[1] * e[:, 2])


def _box_block(n, vert, lo, hi, ids=None) -> HexMesh:
    """The HexMesh of the elements of the box of ``n`` elements per side (vertex coordinates
    ``vert``) whose indices lie in [lo[d], hi[d]) along each axis d (the whole box for lo 0 and
    hi n): in the box's element order (colour by colour, each by box number: its
    ``element_ids``; or ``ids``, those box numbers in another order, colour by colour), its
    nodes numbered in the box's order, its colours and boundary faces the box's (faces
    inside the box are none)."""
    ids = box_block_ids(n, lo, hi) if ids is None else ids
    cells, pressure_cells = _box_cells(n, ids, lo, hi)
    geometry, colours, boundary = _box_elements(n, vert, ids)
    size = [b - a for a, b in zip(lo, hi)]
    q2 = [_with_midpoints(v)[2 * a : 2 * b + 1] for v, a, b in zip(vert, lo, hi)]
    points = np.empty((len(q2[2]), len(q2[1]), len(q2[0]), 3))
    points[..., 0], points[..., 1], points[..., 2] = q2[0], q2[1][:, None], q2[2][:, None, None]
    return _finish(
        points.reshape(-1, 3),
        cells,
        pressure_cells,
        _grid_id(*(2 * _vertex_indices(size)).T, [2 * v + 1 for v in size]),
        geometry,
        colours,
        ids,
        BOX_TAGS,
        grid=tuple(int(v) for v in n),
        check_geometry=False,
        boundary=boundary,
        n_colours=1 + (n[0] > 1) + 2 * (n[1] > 1) + 4 * (n[2] > 1),
    )


def box_piece(grid, vertices, lo, hi, ids=None):
    """The block of the structured box of ``grid`` elements with vertex coordinates
    ``vertices`` whose element indices lie in [lo[d], hi[d]) along each axis d, alone, without
    the whole box: (mesh, nodes, pressure), mesh as box_mesh numbers and colours it
    (``element_ids`` the box numbers; its elements in the order of ``ids``, box numbers colour
    by colour, where given), and the box's Q2 node and pressure node of each of its nodes."""
    n = [int(v) for v in grid]
    lo, hi = [int(v) for v in lo], [int(v) for v in hi]
    mesh = _box_block(n, [np.asarray(v, dtype=float) for v in vertices], lo, hi, ids)
    nodes = grid_block([np.arange(2 * a, 2 * b + 1) for a, b in zip(lo, hi)], [2 * v + 1 for v in n]).ravel()
    pressure = grid_block([np.arange(a, b + 1) for a, b in zip(lo, hi)], [v + 1 for v in n]).ravel()
    return mesh, nodes, pressure


def _with_midpoints(v: np.ndarray) -> np.ndarray:
    """(2 n + 1,) the vertex coordinates ``v`` (n + 1,) with the midpoint of each interval between them."""
    c = np.empty(2 * len(v) - 1)
    c[0::2] = v
    c[1::2] = 0.5 * (v[:-1] + v[1:])
    return c


def _vertex_indices(n) -> np.ndarray:
    """((nx+1)(ny+1)(nz+1), 3) grid indices (i, j, k) of the vertices of a box of ``n`` = (nx, ny, nz)
    elements, i fastest."""
    k, j, i = np.meshgrid(*(np.arange(v + 1) for v in n[::-1]), indexing="ij")
    return np.stack([i.ravel(), j.ravel(), k.ravel()], axis=1)


def _grid_id(i, j, k, m):
    """Id i + m0 (j + m1 k) of the node (i, j, k) of a grid of m = (m0, m1, m2) nodes (arrays broadcast)."""
    return i + m[0] * (j + m[1] * k)


def grid_index(ids, m) -> tuple:
    """(i, j, k) of the ids i + m0 (j + m1 k) in a grid of m = (m0, m1, ...) points or cells:
    the inverse of :func:`_grid_id`."""
    return ids % m[0], (ids // m[0]) % m[1], ids // (m[0] * m[1])


def grid_block(ranges, m) -> np.ndarray:
    """(len(ranges[2]), len(ranges[1]), len(ranges[0])) int64 the ids in a grid of m points or
    cells of the block of indices ``ranges`` (three integer arrays, one per axis), x fastest."""
    r = [np.asarray(a, dtype=np.int64) for a in ranges]
    return _grid_id(r[0][None, None, :], r[1][None, :, None], r[2][:, None, None], m)


def greedy_colouring(vertex_cells: np.ndarray) -> np.ndarray:
    """(E,) int64 colours of elements such that no two elements sharing a vertex get the same colour.

    ``vertex_cells`` (E, k) vertex ids per element. The colouring is the sequential greedy one
    (elements visited in order, each taking the smallest colour unused by its
    already-coloured neighbours), computed in parallel rounds (Jones-Plassmann with the
    element number as priority): the elements at a vertex are coloured in increasing order,
    so an element is ready when it is the first uncoloured element at each of its vertices,
    and the ready elements of a round share no vertex. Each vertex keeps a bit set of the
    colours at it; rounds are as many as the longest chain of neighbours of increasing number.
    """
    n_elem, k = vertex_cells.shape
    flat = vertex_cells.ravel()
    elem_at = np.argsort(flat, kind="stable") // k  # the elements at each vertex, increasing, vertex after vertex
    valence = np.bincount(flat)
    start = np.cumsum(valence) - valence
    words = int((valence[vertex_cells] - 1).sum(axis=1).max()) // 64 + 1  # colours <= neighbours + 1
    used = np.zeros((len(valence), words), dtype=np.uint64)  # the colours at each vertex, one bit each
    done = np.zeros(len(valence), dtype=np.int64)  # elements coloured at each vertex: the first done of elem_at
    colours = np.empty(n_elem, dtype=np.int64)
    slot = np.empty(n_elem, dtype=np.int64)
    cand = np.arange(n_elem)
    while cand.size:
        verts = vertex_cells[cand]
        ready = np.all(elem_at[start[verts] + done[verts]] == cand[:, None], axis=1)
        cand, verts = cand[ready], verts[ready]
        mask = np.bitwise_or.reduce(used[verts], axis=1)  # (R, words) colours of the coloured neighbours
        word = np.argmax(mask != np.iinfo(np.uint64).max, axis=1)
        low = mask[np.arange(len(cand)), word]
        bit = ~low & (low + np.uint64(1))  # lowest clear bit
        colours[cand] = 64 * word + np.log2(bit).astype(np.int64)
        used[verts, word[:, None]] |= bit[:, None]
        done[verts] += 1
        verts = verts[done[verts] < valence[verts]]
        cand = elem_at[start[verts] + done[verts]]  # the next element at each vertex just passed, once each
        slot[cand] = np.arange(len(cand))
        cand = cand[slot[cand] == np.arange(len(cand))]
    return colours


def _q2_numbering(vertex_cells: np.ndarray, n_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """Q2 node ids for hex8 cells (E, 8, tensor order): vertices keep their ids,
    then one new node per edge, per face and per cell.

    Returns cells (E, 27) and ``kind_key`` (n_new, 8) vertex ids whose trilinear
    average places each new node (edges: 2 distinct vertices, faces: 4, cells: 8).
    """
    n_elem = vertex_cells.shape[0]
    abc = Q2.node_indices
    cells = np.empty((n_elem, 27), dtype=np.int64)
    next_id = n_vertices
    for n_mid in (1, 2, 3):  # edges, faces, cell centres
        local = np.flatnonzero((abc == 1).sum(axis=1) == n_mid)
        spans = []
        for t in local:
            choices = [[0, 1] if abc[t, d] == 1 else [abc[t, d] // 2] for d in range(3)]
            spans.append([a + 2 * b + 4 * c for c in choices[2] for b in choices[1] for a in choices[0]])
        spans = np.array(spans)  # (n_local, 2**n_mid) Q1 tensor ids
        keys = np.sort(vertex_cells[:, spans], axis=2).reshape(-1, spans.shape[1])
        if n_mid == 3:
            ids = np.arange(n_elem)
        else:
            _, ids, _ = unique_rows(keys)
        cells[:, local] = next_id + ids.reshape(n_elem, len(local))
        next_id += ids.max() + 1
    vert_local = np.flatnonzero((abc == 1).sum(axis=1) == 0)
    cells[:, vert_local] = vertex_cells[:, [(a // 2) + 2 * (b // 2) + 4 * (c // 2) for a, b, c in abc[vert_local]]]
    return cells, next_id


def mesh_from_hex8(vertices: np.ndarray, hex_cells: np.ndarray, face_tags=None, tag_names=None) -> HexMesh:
    """HexMesh from hex8 cells (E, 8) in VTK order on ``vertices`` (n, 3).

    Q2 nodes are placed by the trilinear map. ``face_tags`` maps a sorted tuple of
    4 vertex ids to a tag number (boundary faces not in it are untagged).
    """
    used, inv = np.unique(hex_cells, return_inverse=True)
    vcells = inv.reshape(hex_cells.shape)[:, VTK_HEX8_TO_TENSOR]
    verts = np.asarray(vertices, dtype=float)[used]
    cells, n_nodes = _q2_numbering(vcells, len(used))
    geometry = verts[vcells]
    xi = Q2.nodes
    G = Q1.values(xi)  # (27, 8)
    phys = einsum(np, "tg,egd->etd", G, geometry)  # (E, 27, 3)
    points = np.empty((n_nodes, 3))
    points[cells.ravel()] = phys.reshape(-1, 3)
    return _finish_general(points, cells, vcells, geometry, used, face_tags, tag_names)


def mesh_from_hex27(points: np.ndarray, hex27_cells: np.ndarray, face_tags=None, tag_names=None) -> HexMesh:
    """HexMesh from hex27 cells (E, 27) in VTK order; the geometry map is triquadratic."""
    used, inv = np.unique(hex27_cells, return_inverse=True)
    cells = inv.reshape(hex27_cells.shape)[:, VTK_HEX27_TO_TENSOR]
    pts = np.asarray(points, dtype=float)[used]
    vert_local = [a + 3 * b + 9 * c for c in (0, 2) for b in (0, 2) for a in (0, 2)]
    # renumber so that vertices come first: pressure node i is Q2 node i
    vertex_ids = distinct(cells[:, vert_local])
    others = np.setdiff1d(np.arange(len(used)), vertex_ids)
    new_id = np.empty(len(used), dtype=np.int64)
    new_id[vertex_ids] = np.arange(len(vertex_ids))
    new_id[others] = len(vertex_ids) + np.arange(len(others))
    cells = new_id[cells]
    new_points = np.empty_like(pts)
    new_points[new_id] = pts
    vcells = cells[:, vert_local]
    orig_vertex = np.empty(len(vertex_ids), dtype=np.int64)
    orig_vertex[:] = used[vertex_ids]
    return _finish_general(new_points, cells, vcells, new_points[cells], orig_vertex, face_tags, tag_names)


def _finish_general(points, cells, vcells, geometry, original_vertex_id, face_tags, tag_names):
    element_ids = np.arange(len(cells))
    check_elements_distinct(vcells, element_ids)
    colours = greedy_colouring(vcells)
    tag_map = face_tags or {}

    def face_tag_of(keys):
        orig = np.sort(original_vertex_id[keys], axis=1)
        return np.array([tag_map.get(tuple(k), -1) for k in orig.tolist()], dtype=np.int64)

    return _finish(
        points,
        cells,
        vcells,
        np.arange(vcells.max() + 1),
        geometry,
        colours,
        element_ids,
        tag_names or {},
        face_tag_of,
        check_topology=True,
    )


def read_mesh(path: str, tag_field: str | None = None) -> HexMesh:
    """Read a hexahedron or hexahedron27 mesh with meshio, checked (fem3d.discretisation.mesh_checks).

    Boundary tags come from quad/quad9 cells carrying the integer cell data
    ``tag_field`` (default: the first of TAG_FIELDS present); tag names from meshio's
    field_data when given, else "tag<N>". Coincident nodes are merged (their number is
    ``merged_nodes``). InputError, naming the file, for anything unusable.
    """
    m = _read_file(path)
    try:
        hexes, kind = _hexahedra(m)
        points = np.asarray(m.points, dtype=float)
        check_points(points, hexes)
        merge, merged = coincident_nodes(points, hexes)
        face_tags, names = _boundary_tags(m, tag_field, merge)
        build = mesh_from_hex8 if kind == "hexahedron" else mesh_from_hex27
        mesh = build(points, merge[hexes], face_tags, names)
    except InputError as exc:
        raise InputError(f"--mesh {path}: {exc}") from None
    mesh.merged_nodes = merged
    return mesh


def _read_file(path: str):
    """The meshio.Mesh in ``path``; InputError for a missing, empty or unreadable file."""
    import meshio

    if os.path.isdir(path):
        raise InputError(f"--mesh {path} is a directory, not a mesh file")
    if not os.path.isfile(path):
        raise InputError(f"--mesh file not found: {path}")
    if os.path.getsize(path) == 0:
        raise InputError(f"--mesh {path} is empty (0 bytes)")
    messages = io.StringIO()
    try:  # meshio prints while reading, and exits the process when no reader fits
        with contextlib.redirect_stdout(messages), contextlib.redirect_stderr(messages):
            return meshio.read(path)
    except (Exception, SystemExit) as exc:
        detail = (str(exc) if isinstance(exc, Exception) else "") or messages.getvalue()
        detail = " ".join(detail.split())[:200]
        raise InputError(f"--mesh {path}: meshio cannot read it ({detail or type(exc).__name__})") from None


def _hexahedra(m) -> tuple[np.ndarray, str]:
    """(cells (E, 8|27) in VTK order, "hexahedron" or "hexahedron27"): the mesh's only kind of solid cell."""
    solids = sorted({b.type for b in m.cells if b.type.startswith(SOLID_CELLS) and len(b.data)})
    if not any(t in ("hexahedron", "hexahedron27") for t in solids):
        found = ", ".join(sorted({b.type for b in m.cells})) or "none"
        raise InputError(f"no hexahedron or hexahedron27 cells (cell types: {found})")
    if len(solids) > 1:
        raise InputError(
            f"the mesh mixes the solid cell types {', '.join(solids)}; it must be all hexahedron or all hexahedron27"
        )
    kind = solids[0]
    return np.concatenate([np.asarray(b.data, dtype=np.int64) for b in m.cells if b.type == kind]), kind


def _boundary_tags(m, tag_field: str | None, merge: np.ndarray) -> tuple[dict, dict]:
    """(sorted merged vertex ids of each tagged quad -> tag, tag name -> tag) from the quad/quad9
    cells with integer cell data ``tag_field`` (or the first of TAG_FIELDS present)."""
    integer = sorted(
        name
        for name, blocks in m.cell_data.items()
        if all(np.issubdtype(np.asarray(b).dtype, np.integer) for b in blocks)
    )
    if tag_field is not None and tag_field not in integer:
        raise InputError(
            f"--tag-field {tag_field!r} is not integer cell data of the file (integer cell data: "
            f"{', '.join(integer) or 'none'})"
        )
    field_name = tag_field or next((f for f in TAG_FIELDS if f in m.cell_data), None)
    face_tags, names = {}, {}
    if field_name is not None:
        for block, data in zip(m.cells, m.cell_data[field_name]):
            if block.type in ("quad", "quad9"):
                quads = np.sort(merge[np.asarray(block.data)[:, :4]], axis=1)
                for quad, tag in zip(quads.tolist(), np.asarray(data).ravel().tolist()):
                    if face_tags.setdefault(tuple(quad), int(tag)) != int(tag):
                        centre = np.asarray(m.points, dtype=float)[quad].mean(axis=0)
                        raise InputError(
                            f"the boundary face at {point_text(centre)} carries two tags, "
                            f"{face_tags[tuple(quad)]} and {int(tag)}; give each face one"
                        )
    for name, val in (m.field_data or {}).items():
        if np.asarray(val).size >= 2 and int(np.asarray(val).ravel()[1]) == 2:
            names[name] = int(np.asarray(val).ravel()[0])
    for t in set(face_tags.values()):
        if t not in names.values():
            names[f"tag{t}"] = t
    return face_tags, names


def point_text(p) -> str:
    """ "(x, y, z)" of a point (3,), for messages."""
    return "(" + ", ".join(f"{v:.6g}" for v in p) + ")"
