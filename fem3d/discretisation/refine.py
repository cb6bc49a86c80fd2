"""Uniform refinement of hexahedral meshes, nested: ``refine(mesh, times)``.

Each element is cut into 8 children in its reference cube [-1, 1]^3: child c = i + 2 j + 4 k
(i, j, k in {0, 1} along the parent's xi, eta, zeta) is the sub-cube whose reference
coordinates are (xi + (2 i - 1, 2 j - 1, 2 k - 1)) / 2 of the parent's, with its local axes
along the parent's. The fine Q2 nodes of a parent form a 5 x 5 x 5 lattice (LATTICE): at even
lattice positions the parent's 27 Q2 nodes, so a fine vertex id is the coarse Q2 node id; the
others are new. A new node inside the parent belongs to it alone and is numbered parent by
parent; one on a parent's face or edge, which the neighbours share, is named by two coarse
Q2 nodes whatever the parents' orientations: the corner of its lattice cell nearest the
parent's centre (the face centre or edge midpoint it lies on) and the opposite one, and
numbered by the first, then the second (:class:`Refined`), so that any parent's fine nodes
are numbered from the coarse mesh alone. Every new node and geometry node is placed by the PARENT's map
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

from functools import cached_property

import numpy as np

from gpucfd.errors import check_range
from gpucfd.sets import distinct
from .element import FACES, Q1, Q2
from .geometry import geometry_element
from .mesh import CHUNK, HexMesh, LazyMesh, greedy_colouring

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
ON_FACE = np.array(
    [[c for c in range(8) if (SHIFTS[c, FACES[f][0]] > 0) == bool(FACES[f][1])] for f in range(6)]
)  # (6, 4) the children on each face of the parent (FACES order)
CHILD_LATTICE = np.array(
    [[(2 * i + a) + 5 * (2 * j + b) + 25 * (2 * k + c) for a, b, c in Q2.node_indices] for i, j, k in (SHIFTS + 1) // 2]
)  # (8, 27) lattice point of each child's Q2 node


def child_maps(element, at) -> np.ndarray:
    """(8, at.n_nodes, element.n_nodes): values of ``element``'s shape functions at the nodes
    of the Lagrange element ``at`` placed in each child (in the parent's reference cube)."""
    return np.stack([element.values((at.nodes + s) / 2) for s in SHIFTS])


def refine(mesh: HexMesh, times: int = 1) -> HexMesh:
    """``mesh`` refined uniformly ``times`` times (0 <= times <= REFINE_MAX); the result's
    ``coarser`` chain leads back to ``mesh``, its element_ids are 8 k + c for child c of
    element k. InputError naming --refine for a bad count. The children need no check of their
    own: each child's map is a part of its parent's, whose Jacobian determinant was proved
    positive over the whole element (fem3d.discretisation.geometry.check_elements)."""
    check_range("--refine", times, low=0, high=REFINE_MAX, integer=True)
    for _ in range(int(times)):
        mesh = Refined(mesh)
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
KIND = (Q2.node_indices == 1).sum(axis=1)  # (27,) a Q2 node is a vertex (0), edge midpoint, face centre, centre (3)
NEW_ON = np.array([0, 2, 8, 0])  # new nodes on the edge or face that a coarse Q2 node of each kind is the middle of
_GROUPS = [
    np.array([np.flatnonzero(_NEAR == q) for q in range(27) if KIND[q] == k]) for k in (1, 2)
]  # (12, 2) and (6, 8): the shared lattice points on each edge and each face (indices into _SHARED)
_GROUP_ROW = np.zeros(27, dtype=np.int64)
for _rows in _GROUPS:
    _GROUP_ROW[_NEAR[_rows[:, 0]]] = np.arange(len(_rows))  # each edge midpoint's and face centre's row


_WHAT = np.zeros(len(LATTICE), dtype=np.int64)  # each lattice point: a coarse Q2 node (0), shared (1), inside (2)
_WHAT[_SHARED], _WHAT[_INSIDE] = 1, 2
_INDEX = np.zeros(len(LATTICE), dtype=np.int64)  # and its Q2 node, its index in _SHARED, or in _INSIDE
_INDEX[_KEPT], _INDEX[_SHARED], _INDEX[_INSIDE] = _tensor(LATTICE[_KEPT] // 2), np.arange(72), np.arange(26)
_POSITIONS = np.array(
    [sum(1 << c for c in range(8) if q in CHILD_VERTICES[c]) for q in range(27)], dtype=np.uint8
)  # (27,) the children (bits) having each Q2 node of their parent as a vertex
_COUNTS = np.array([bin(int(b)).count("1") for b in _POSITIONS], dtype=np.float64)
_BITS = np.array([bin(b).count("1") for b in range(256)], dtype=np.int64)  # set bits of each byte
_MEMBERS = np.empty((len(_SHARED), 8), dtype=np.int64)  # each shared point's edge or face, padded with itself
for _rows in _GROUPS:
    for _row in _rows:
        _MEMBERS[_row, : len(_row)] = _row
        _MEMBERS[_row, len(_row) :] = _row[:, None]


class Refined(LazyMesh):
    """``coarse`` (a whole mesh) refined once, known by it. Fine nodes: the coarse Q2 nodes
    keep their ids; the new nodes on the edge or face whose middle is coarse Q2 node q
    (NEW_ON: 2 or 8) follow, q by q, each edge's or face's in the order of their far corners'
    ids (:meth:`lattice_at`); then the 26 inside each parent, parent by parent. Colours:
    8 k + c for child c of a parent of class k, the parents classed greedily so that no two of
    a class have children of one position that share a vertex (one class where neighbouring
    parents are aligned); each colour's elements by their parents' order. So a fine element's
    nodes, vertices (the coarse Q2 nodes: pressure node q is Q2 node q), geometry and place,
    and a node's coordinates (kept: the coarse node's; new: the parent's map at its lattice
    point) come from the coarse mesh alone, and a rank builds its part of the refined mesh
    from its parents (fem3d.parallel.partition.refined_part)."""

    def __init__(self, coarse: HexMesh):
        self.coarser, self.tag_names, self.grid, self.merged_nodes, self.whole = (
            coarse,
            dict(coarse.tag_names),
            None,
            0,
            None,
        )
        coarse.cells  # made whole (1/8 of this mesh): this mesh's answers read it over and over
        n_c, e_c = coarse.n_nodes, coarse.n_elements
        kind = np.zeros(n_c, dtype=np.int64)
        self._holder = np.empty(n_c, dtype=np.int64)  # an (element * 27 + local node) holding each coarse node
        union, total = np.zeros(n_c, dtype=np.uint8), np.zeros(n_c, dtype=np.int64)  # of the positions holding it
        for a in range(0, e_c, CHUNK):  # piece by piece: temporaries of a bounded size
            cells = coarse.cells_of(slice(a, a + CHUNK))
            kind[cells] = KIND
            self._holder[cells] = 27 * a + np.arange(cells.size).reshape(cells.shape)
            np.bitwise_or.at(union, cells, _POSITIONS)
            total += np.bincount(cells.ravel(), np.tile(_COUNTS, len(cells)), minlength=n_c).astype(np.int64)
        self._entity_start = n_c + np.concatenate([[0], np.cumsum(NEW_ON[kind])])  # (n_c + 1,)
        clash = total > _BITS[union]  # a vertex of children of one position of two parents
        some = np.flatnonzero(
            np.concatenate([clash[coarse.cells_of(slice(a, a + CHUNK))].any(axis=1) for a in range(0, e_c, CHUNK)])
        )  # the parents that need classing: none where all are aligned
        self._class = np.zeros(e_c, dtype=np.int64)
        if some.size:
            keys = coarse.cells_of(some)[:, CHILD_VERTICES] * 8 + np.arange(8)[:, None]  # (vertex, position)
            self._class[some] = greedy_colouring(keys.reshape(len(some), -1))
        counts = np.bincount(self._class)
        self._class_start = np.concatenate([[0], np.cumsum(counts)])
        self._by_class = np.argsort(self._class, kind="stable")  # the parents class by class, each in order
        self._rank = np.empty(e_c, dtype=np.int64)
        self._rank[self._by_class] = np.arange(e_c) - np.repeat(self._class_start[:-1], counts)
        self.colour_offsets = np.concatenate([[0], np.cumsum(np.repeat(counts, 8))]).astype(np.int64)

    def __repr__(self) -> str:  # the dataclass's would make and print every array
        return f"Refined({self.coarser.n_elements} elements refined once, built={self.built})"

    @property
    def n_elements(self) -> int:
        return 8 * self.coarser.n_elements

    @property
    def n_nodes(self) -> int:
        return int(self._entity_start[-1]) + len(_INSIDE) * self.coarser.n_elements

    @property
    def n_pressure(self) -> int:
        return self.coarser.n_nodes

    @property
    def n_geometry(self) -> int:
        return self.coarser.n_geometry

    def element_of(self, parents, positions) -> np.ndarray:
        """(m,) int64 the elements that are child ``positions`` (m,) of ``parents`` (m,) (coarse elements)."""
        k = self._class[parents]
        return (
            8 * self._class_start[k]
            + positions * (self._class_start[k + 1] - self._class_start[k])
            + self._rank[parents]
        )

    def place(self, elements) -> tuple[np.ndarray, np.ndarray]:
        """(parent, position) (m,) of ``elements`` (indices or a slice)."""
        if isinstance(elements, slice):
            i = np.arange(*elements.indices(self.n_elements))
        else:
            i = np.asarray(elements, dtype=np.int64)
        colour = np.searchsorted(self.colour_offsets, i, side="right") - 1
        return self._by_class[self._class_start[colour // 8] + i - self.colour_offsets[colour]], colour % 8

    def children_at(self, parents, xi) -> tuple[np.ndarray, np.ndarray]:
        """(elements (m,), reference coordinates (m, 3)) of the points at reference coordinates
        ``xi`` (m, 3) of ``parents`` (m,) (-1: none) in their children (the same -1)."""
        upper = xi > 0
        elements = np.where(parents < 0, -1, self.element_of(np.maximum(parents, 0), upper @ np.array([1, 2, 4])))
        return elements, np.clip(2 * xi - (2 * upper - 1), -1.0, 1.0)

    @cached_property
    def parent(self) -> np.ndarray:
        return self.place(slice(None))[0]

    @cached_property
    def child_position(self) -> np.ndarray:
        return self.place(slice(None))[1]

    @cached_property
    def element_ids(self) -> np.ndarray:
        """(E,) int64 8 k + c for child c of the coarse element of id k."""
        return 8 * self.coarser.element_ids[self.parent] + self.child_position

    def elements_with_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        return self.element_of(self.coarser.elements_with_ids(ids // 8), ids % 8)

    @cached_property
    def _boundary(self) -> tuple[np.ndarray, np.ndarray]:
        """(boundary_faces (F, 2), boundary_tags (F,)): the four children of each coarse
        boundary face on it, with its tag, by element and face."""
        faces, tags = self.coarser.boundary_faces, self.coarser.boundary_tags
        children = self.element_of(faces[:, :1], ON_FACE[faces[:, 1]])  # (F, 4)
        idx = 6 * children + faces[:, 1:]
        order = np.argsort(idx.ravel())
        idx = idx.ravel()[order]
        return np.stack([idx // 6, idx % 6], axis=1), np.repeat(tags, 4)[order]

    def lattice_at(self, parents, points) -> np.ndarray:
        """(m, k) int64 the fine node ids at the lattice points ``points`` (m, k) (LATTICE
        indices) of ``parents`` (m,). A shared point's place among the new nodes of its edge or
        face (the points whose nearest corner, a coarse Q2 node, is its own) is the count of
        those whose far corner's coarse node id is smaller: the same from every parent sharing
        the edge or face, whatever its orientation."""
        parents = np.asarray(parents, dtype=np.int64)
        points = np.broadcast_to(points, (len(parents),) + np.shape(points)[-1:])
        out = np.empty(points.shape, dtype=np.int64)
        rows_per = max(1, CHUNK // points.shape[1])
        for a in range(0, len(parents), rows_per):  # piece by piece: no (m, k, 8) array of the far corners
            p, at = parents[a : a + rows_per], points[a : a + rows_per]
            cells, what, index = self.coarser.cells_of(p), _WHAT[at], _INDEX[at]
            row = np.broadcast_to(np.arange(len(p))[:, None], at.shape)
            ids = self._entity_start[-1] + len(_INSIDE) * p[:, None] + index
            kept = what == 0
            ids[kept] = cells[row[kept], index[kept]]
            shared = np.flatnonzero(what.ravel() == 1)
            r, q = row.ravel()[shared], index.ravel()[shared]
            far = cells[r[:, None], _FAR[_MEMBERS[q]]]  # (s, 8) the far corners of the point's edge or face
            rank = (far < cells[r, _FAR[q]][:, None]).sum(axis=1)
            ids.ravel()[shared] = self._entity_start[cells[r, _NEAR[q]]] + rank
            out[a : a + rows_per] = ids
        return out

    def lattice_of(self, parents) -> np.ndarray:
        """(m, 125) int64 the fine node ids of the 5 x 5 x 5 lattice (LATTICE order) of ``parents`` (m,)."""
        return self.lattice_at(parents, np.arange(len(LATTICE)))

    def _cells_from(self, elements) -> np.ndarray:
        parents, positions = self.place(elements)
        return self.lattice_at(parents, CHILD_LATTICE[positions])

    def _pressure_cells_from(self, elements) -> np.ndarray:
        parents, positions = self.place(elements)
        return np.take_along_axis(self.coarser.cells_of(parents), CHILD_VERTICES[positions], axis=1)

    def _geometry_from(self, elements) -> np.ndarray:
        parents, positions = self.place(elements)
        maps = child_maps(*[geometry_element(self.n_geometry)] * 2)
        out = np.empty((len(parents), self.n_geometry, 3))
        for c in range(8):  # one matrix per child position: no (m, G, G) stack of maps
            at = np.flatnonzero(positions == c)
            out[at] = np.matmul(maps[c], self.coarser.geometry_of(parents[at]))
        return out

    def _vertices_from(self, elements) -> np.ndarray:
        return self.points_of(self.pressure_cells_of(elements))

    def _points_from(self, nodes) -> np.ndarray:
        nodes = np.asarray(nodes, dtype=np.int64)
        flat = nodes.ravel()
        out = np.empty((len(flat), 3))
        kept = flat < self.coarser.n_nodes
        out[kept] = self.coarser.points_of(flat[kept])
        new = np.flatnonzero(~kept)
        parents, lattice = self._lattice_places(flat[new])
        by_parent = np.argsort(parents, kind="stable")
        parents, lattice, new = parents[by_parent], lattice[by_parent], new[by_parent]
        values = geometry_element(self.n_geometry).values(LATTICE / 2 - 1)  # (125, G)
        held = distinct(parents)
        for a in range(0, len(held), CHUNK // len(LATTICE)):  # each parent's lattice points at once, piece by piece
            block = held[a : a + CHUNK // len(LATTICE)]
            lo, hi = np.searchsorted(parents, block[0], side="left"), np.searchsorted(parents, block[-1], side="right")
            mapped = np.matmul(values, self.coarser.geometry_of(block))  # (b, 125, 3)
            out[new[lo:hi]] = mapped[np.searchsorted(block, parents[lo:hi]), lattice[lo:hi]]
        return out.reshape(nodes.shape + (3,))

    def _lattice_places(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(parent, lattice point) (m,) of new fine nodes ``ids`` (m,): of a shared node, those
        in the coarse element holding its edge's or face's middle node."""
        parents, lattice = np.empty(len(ids), dtype=np.int64), np.empty(len(ids), dtype=np.int64)
        inside = ids >= self._entity_start[-1]
        q = ids[inside] - self._entity_start[-1]
        parents[inside], lattice[inside] = q // len(_INSIDE), _INSIDE[q % len(_INSIDE)]
        shared = np.flatnonzero(~inside)
        middle = np.searchsorted(self._entity_start, ids[shared], side="right") - 1
        held = self._holder[middle]
        for rows in _GROUPS:
            at = np.flatnonzero(KIND[held % 27] == (1 if rows.shape[1] == 2 else 2))
            p, group = held[at] // 27, rows[_GROUP_ROW[held[at] % 27]]  # (m,), (m, 2 | 8)
            order = np.argsort(np.take_along_axis(self.coarser.cells_of(p), _FAR[group], axis=1), axis=1)
            place = ids[shared[at]] - self._entity_start[middle[at]]
            parents[shared[at]] = p
            lattice[shared[at]] = _SHARED[group[np.arange(len(at)), order[np.arange(len(at)), place]]]
        return parents, lattice

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        chunks = [self.points_of(np.arange(a, min(a + CHUNK, self.n_nodes))) for a in range(0, self.n_nodes, CHUNK)]
        return np.min([c.min(axis=0) for c in chunks], axis=0), np.max([c.max(axis=0) for c in chunks], axis=0)

    def _arrays(self) -> tuple:
        parents, positions = self.parent, self.child_position
        lattice = self.lattice_of(np.arange(self.coarser.n_elements))
        return (
            self.points_of(np.arange(self.n_nodes)),
            lattice[parents[:, None], CHILD_LATTICE[positions]],
            self.pressure_cells_of(slice(None)),
            np.arange(self.coarser.n_nodes),
            self.geometry_of(slice(None)),
        )
