"""Coarsening of hexahedral meshes by pairing their sheets: the multigrid levels below a mesh
that refines none (a mesh read from a file), the counterpart of fem3d.discretisation.refine.

A sheet is a layer of elements: a class of element edges under "opposite edges of one face"
(a dual surface of the mesh). In a structured box the sheets along x are the layers of
elements i = const; in an O-grid the rings around the core are sheets, and the core's rows
continue into the outer blocks as radial lines. Each element lies in three sheets, one per
reference axis (the class of its four edges along that axis). Two sheets are neighbours when
every element of each has, across one of its faces normal to that axis, an element of the
other: together they make one coarse layer. Sheets are paired along each chain of neighbours
as a box's layers are (fem3d.solvers.multigrid.split: an odd chain keeps one sheet whole, the
one nearest its middle whose index is 2 modulo 4), and each element with its partners across
the faces to its paired sheets makes one parent: 1, 2, 4 or 8 children, each the lower half,
the upper half or the whole of the parent along each of the parent's reference axes. The
parent's axes are those of its lowest-numbered child; the others may be turned, so each
child's reference coordinates map to its parent's by a signed permutation of the axes and a
shift (``rotation`` and ``code`` of :class:`Coarsening`).

Elements much longer along one axis than along another (boundary layers, stretched cells) are
coarsened along their short axes first, semi-coarsening: element Vanka smooths the errors that
vary along the short axes, where the coupling is strong, so the coarse level must keep the
resolution along the long ones. A sheet pairs only where no element of it is long along its
axis (more than STRONG times its shortest length); where that keeps more than SHRINK of the
elements, sheets with up to a quarter of such elements may pair, then all (LONG_SHARES).

A parent's nodes are its children's (its vertices and, along paired axes, its mid nodes are
vertices of children), so the coarse mesh is a hexahedral mesh on fine nodes, with their
coordinates as its triquadratic geometry. It is an algebraic level: its Galerkin operators
come from the children's (fem3d.solvers.multigrid), and its geometry and boundary faces
(untagged) serve only to order and group its elements. Sheets that cross themselves, or that
do not face one neighbour over their whole extent (blocks whose layers do not line up), stay
whole; pairs whose parents would not be hexahedra are left whole too, and a mesh where no
sheet pairs, or whose parents would not make a conforming mesh, has no coarsening (None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .element import Q2
from .mesh import AXIS_EDGES, HexMesh, _finish, face_keys, greedy_colouring, Q2_FACE_NODES
from .mesh_checks import unique_rows
from gpucfd.sets import members

VERTEX_NODES = np.array(
    [a + 3 * b + 9 * c for c in (0, 2) for b in (0, 2) for a in (0, 2)]
)  # Q2 node of each Q1 vertex
EDGE_NODES = np.array(
    [[VERTEX_NODES[a], (VERTEX_NODES[a] + VERTEX_NODES[b]) // 2, VERTEX_NODES[b]] for a, b in AXIS_EDGES.reshape(-1, 2)]
)  # (12, 3) Q2 nodes along each edge: end, middle, end
STRONG = 2.0  # an element is long along an axis where it is more than this many times its shortest length there
LONG_SHARES = (0.0, 0.25, 1.0)  # the shares of elements long along its axis with which a sheet may pair, tried in turn:
# the first whose coarsening keeps at most SHRINK of the elements is taken (semi-coarsening where it coarsens enough)
SHRINK = 0.9  # a coarsening keeps at most this share of the elements, else there is none
RETRIES = 8  # rounds of leaving whole the pairs whose parents are not hexahedra


@dataclass
class Coarsening:
    """A whole mesh's next coarser level: ``coarse`` (HexMesh), and for each fine element its
    ``parent`` (E,) element of ``coarse``, its ``code`` (E,) a + 3 b + 9 g (0: the lower half,
    1: the upper half, 2: the whole of the parent along the parent's axes xi, eta, zeta) and
    its ``rotation`` (E, 3, 3) int8: the parent's reference coordinates are
    rotation @ xi + shift at the child's xi, the shift following from the code."""

    coarse: HexMesh
    parent: np.ndarray
    code: np.ndarray
    rotation: np.ndarray


def coarsen(mesh: HexMesh) -> Coarsening | None:
    """The sheets of the whole mesh ``mesh`` paired (module docstring), None where none pairs."""
    sheet = element_sheets(mesh.pressure_cells)
    neighbour, neighbour_face = face_neighbours(mesh.pressure_cells)
    across, s, t = _neighbour_sheets(sheet, neighbour, neighbour_face)
    lengths = mesh.axis_lengths
    long = lengths > STRONG * lengths.min(axis=1, keepdims=True)
    n_sheets = int(sheet.max()) + 1
    share = np.bincount(sheet.ravel(), long.ravel(), minlength=n_sheets) / np.bincount(
        sheet.ravel(), minlength=n_sheets
    )
    usable = np.ones(len(s), dtype=bool)  # False for the pairs whose parents were not hexahedra
    for _ in range(RETRIES):
        for most in LONG_SHARES:  # the strictest that coarsens enough
            allowed = usable & (share[s] <= most) & (share[t] <= most)
            partner, side = _partners(sheet, across, neighbour, _matching(n_sheets, s[allowed], t[allowed]))
            if (0.5 ** (partner >= 0).sum(axis=1)).sum() <= SHRINK * mesh.n_elements:
                break
        else:
            return None
        placed = _parents(mesh, sheet, partner, side, neighbour, neighbour_face)
        if isinstance(placed, np.ndarray):  # the sheet pairs (s, t) of parents that are not hexahedra
            usable &= ~np.isin(s * n_sheets + t, placed[:, 0] * n_sheets + placed[:, 1])
            continue
        return _coarse_mesh(mesh, *placed)
    return None


def child_kinds(code, rotation) -> np.ndarray:
    """(E,) int64 one number for each distinct pair of position code ``code`` (E,) and
    ``rotation`` (E, 3, 3) of children: those placed alike in their parents share it."""
    return code + 27 * ((np.asarray(rotation, dtype=np.int64).reshape(len(code), 9) + 1) @ 3 ** np.arange(9))


def element_sheets(pressure_cells: np.ndarray) -> np.ndarray:
    """(E, 3) the sheet of each element along each reference axis: the class of its four edges
    along that axis under "opposite edges of one face", numbered 0, 1, ..."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(pressure_cells)
    ends = np.sort(pressure_cells[:, AXIS_EDGES], axis=-1).reshape(-1, 2)  # (E * 12, 2)
    _, edge, counts = unique_rows(ends)
    edge = edge.reshape(n, 3, 4)
    first = np.repeat(edge[:, :, :1], 3, axis=2).ravel()
    graph = coo_matrix((np.ones(first.size), (first, edge[:, :, 1:].ravel())), shape=(len(counts),) * 2)
    _, label = connected_components(graph, directed=False)
    return label[edge[:, :, 0]]


def face_neighbours(pressure_cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((E, 6) the element across each face (FACES order), -1 on the boundary; (E, 6) that
    element's face)."""
    n = len(pressure_cells)
    _, inverse, counts = unique_rows(face_keys(pressure_cells))
    order = np.argsort(inverse, kind="stable")
    starts = np.cumsum(counts) - counts
    two = np.flatnonzero(counts == 2)
    a, b = order[starts[two]], order[starts[two] + 1]
    neighbour, neighbour_face = np.full(6 * n, -1, dtype=np.int64), np.full(6 * n, -1, dtype=np.int64)
    neighbour[a], neighbour[b], neighbour_face[a], neighbour_face[b] = b // 6, a // 6, b % 6, a % 6
    return neighbour.reshape(n, 6), neighbour_face.reshape(n, 6)


def _neighbour_sheets(sheet, neighbour, neighbour_face) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(across (E, 3, 2) the sheet of the element across each face along each axis (-1 on the
    boundary); s, t: the pairs of neighbouring sheets, s < t, that face each other over their
    whole extent (every element of each has one face to the other) and cross neither
    themselves nor each other twice)."""
    n_elem = len(sheet)
    n_sheets = int(sheet.max()) + 1
    crossing = np.zeros(n_sheets, dtype=bool)  # sheets that cross themselves
    for a, b in ((0, 1), (0, 2), (1, 2)):
        crossing[sheet[:, a][sheet[:, a] == sheet[:, b]]] = True
    across = np.where(neighbour >= 0, sheet[neighbour, np.maximum(neighbour_face, 0) // 2], -1).reshape(n_elem, 3, 2)
    size = np.bincount(sheet.ravel(), minlength=n_sheets)
    own = np.repeat(sheet[:, :, None], 2, axis=2)
    sandwich = (across >= 0) & (across[:, :, ::-1] == across)  # both faces of an element to one sheet
    keep = (across >= 0) & (across != own) & ~sandwich
    pairs, counts = np.unique(own[keep] * n_sheets + across[keep], return_counts=True)
    s, t = pairs // n_sheets, pairs % n_sheets
    good = (counts == size[s]) & (size[s] == size[t]) & ~crossing[s] & ~crossing[t] & (s < t)
    good &= ~np.isin(pairs, own[sandwich] * n_sheets + across[sandwich])
    return across, s[good], t[good]


def _partners(sheet, across, neighbour, mate) -> tuple[np.ndarray, np.ndarray]:
    """((E, 3) the element across the face to the paired sheet along each axis, -1 where the
    sheet stays whole; (E, 3) that face's side, 0 or 1), the sheets paired as ``mate``
    (n_sheets,) says (-1: whole)."""
    target = mate[sheet][:, :, None]  # (E, 3, 1) the sheet paired with each element's along each axis
    hit = (across == target) & (target >= 0)
    side = np.argmax(hit, axis=2)
    partner = np.where(hit.any(axis=2), neighbour[np.arange(len(sheet))[:, None], 2 * np.arange(3) + side], -1)
    return partner, side


def _matching(n_sheets: int, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(n_sheets,) the sheet paired with each, -1 for none: along every chain of neighbours
    (s[i], t[i]) the sheets in consecutive pairs, an odd chain's sheet nearest its middle
    whose index is 2 modulo 4 left whole (a closed chain's first); greedily where a sheet has
    more than two neighbours."""
    mate = np.full(n_sheets, -1, dtype=np.int64)
    links = [[] for _ in range(n_sheets)]
    for a, b in zip(s.tolist(), t.tolist()):
        links[a].append(b)
        links[b].append(a)
    seen = np.zeros(n_sheets, dtype=bool)
    for start in np.flatnonzero(np.array([len(x) for x in links], dtype=np.int64) > 0):
        if seen[start]:
            continue
        component, todo = [], [int(start)]
        seen[start] = True
        while todo:
            a = todo.pop()
            component.append(a)
            for b in links[a]:
                if not seen[b]:
                    seen[b] = True
                    todo.append(b)
        if max(len(links[a]) for a in component) > 2:
            for a in sorted(component):
                for b in links[a]:
                    if mate[a] < 0 and mate[b] < 0:
                        mate[a], mate[b] = b, a
            continue
        ends = [a for a in component if len(links[a]) == 1]
        chain = [ends[0] if ends else min(component)]
        while len(chain) < len(component):
            chain.append(next(b for b in links[chain[-1]] if b not in chain[-2:]))
        n = len(chain)
        whole = (4 * ((n - 2) // 8) + 2 if ends else 0) if n % 2 else None
        rest = [a for k, a in enumerate(chain) if k != whole]
        for a, b in zip(rest[0::2], rest[1::2]):
            mate[a], mate[b] = b, a
    return mate


def _parents(mesh, sheet, partner, side, neighbour, neighbour_face):
    """(group (E,) the parent of each element, numbered 0.., rotation (E, 3, 3), shift (E, 3),
    paired (G, 3) the parents' paired axes); or (m, 2) the sheet pairs (s, t), s < t, of the
    elements whose parents are not hexahedra."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n_elem = mesh.n_elements
    e, d = np.nonzero(partner >= 0)
    graph = coo_matrix((np.ones(len(e)), (e, partner[e, d])), shape=(n_elem, n_elem))
    _, group = connected_components(graph, directed=False)
    paired = partner >= 0
    count = np.bincount(group)
    bad = count[group] != 2 ** paired.sum(axis=1)
    anchor = np.full(len(count), n_elem)
    np.minimum.at(anchor, group, np.arange(n_elem))
    parent_paired = paired[anchor]  # (G, 3)
    rotation = np.zeros((n_elem, 3, 3), dtype=np.int64)
    shift = np.zeros((n_elem, 3), dtype=np.int64)
    placed = np.zeros(n_elem, dtype=bool)
    rotation[anchor] = np.eye(3, dtype=np.int64)
    shift[anchor] = np.where(parent_paired & (side[anchor] == 0), 2, 0)
    placed[anchor] = True
    for _ in range(3):  # a child is at most three faces from its parent's first child
        e, d = np.nonzero(placed[:, None] & (partner >= 0))
        f = partner[e, d]
        fresh = ~placed[f]
        e, d, f = e[fresh], d[fresh], f[fresh]
        f, first = np.unique(f, return_index=True)
        e, d = e[first], d[first]
        if not len(f):
            break
        rotation[f], shift[f] = _across(mesh.cells, e, 2 * d + side[e, d], f, neighbour_face, rotation[e], shift[e])
        placed[f] = True
    centre = rotation.sum(axis=2) + shift  # the lattice point of each child's centre node (1, 1, 1)
    own = np.abs(rotation).astype(bool)  # own[e, i, j]: the child's axis j is the parent's axis i
    expected = np.where(parent_paired[group], np.isin(centre, (1, 3)), centre == 1).all(axis=1)
    consistent = ((own & paired[:, None, :]).any(axis=2) == parent_paired[group]).all(axis=1)
    slot = group * 27 + _codes(centre, parent_paired[group])
    bad |= ~placed | ~expected | ~consistent | (np.bincount(slot, minlength=27 * len(count))[slot] > 1)
    if bad.any():
        e, d = np.nonzero(bad[:, None] & paired)
        s, t = sheet[e, d], sheet[partner[e, d], neighbour_face[e, 2 * d + side[e, d]] // 2]
        return np.stack([np.minimum(s, t), np.maximum(s, t)], axis=1)
    return group, rotation, shift, parent_paired


def _across(cells, e, face, f, neighbour_face, rotation, shift):
    """(rotation (m, 3, 3), shift (m, 3)) of the elements ``f`` from their neighbours ``e``
    across the faces ``face`` of e (parent lattice coordinates = rotation @ abc + shift at
    the Q2 node abc in 0..2 of an element): f's nodes on the shared face sit where e's do,
    and f lies on the side of the face away from e."""
    m = len(e)
    rows = np.arange(m)
    face_f = neighbour_face[e, face]
    ids_e, ids_f = cells[e[:, None], Q2_FACE_NODES[face]], cells[f[:, None], Q2_FACE_NODES[face_f]]
    at = np.argmax(ids_f[:, :, None] == ids_e[:, None, :], axis=2)  # (m, 9) e's face node at each of f's
    abc_e = Q2.node_indices[Q2_FACE_NODES[face][rows[:, None], at]]  # (m, 9, 3)
    lattice = np.matmul(abc_e, rotation.transpose(0, 2, 1)) + shift[:, None, :]
    abc_f = Q2.node_indices[Q2_FACE_NODES[face_f]]
    corr = np.matmul(
        (lattice - lattice.mean(axis=1, keepdims=True)).transpose(0, 2, 1), abc_f - abc_f.mean(axis=1, keepdims=True)
    )
    out = np.where((np.abs(corr) == np.abs(corr).max(axis=1, keepdims=True)) & (corr != 0), np.sign(corr), 0).astype(
        np.int64
    )
    normal = face_f // 2  # f's axis across the face
    free_row = np.argmin(np.abs(out).sum(axis=2), axis=1)  # the parent's axis not yet taken
    centre_e = rotation.sum(axis=2) + shift
    away = np.sign(lattice[rows, 0, free_row] - centre_e[rows, free_row])
    out[rows, free_row, normal] = away * (1 - abc_f[rows, 0, normal])
    return out, lattice[:, 0] - np.matmul(out, abc_f[:, 0, :, None])[:, :, 0]


def _codes(centre, paired) -> np.ndarray:
    """(E,) position codes of children whose centres sit at the parent lattice points ``centre``
    (E, 3) (1 or 3 along paired axes, 1 along whole ones)."""
    along = np.where(paired, (centre - 1) // 2, 2)
    return along[:, 0] + 3 * along[:, 1] + 9 * along[:, 2]


def _coarse_mesh(mesh, group, rotation, shift, paired) -> Coarsening | None:
    """The coarse mesh of the parents ``group``; None where its elements are not conforming."""
    n_groups = len(paired)
    codes = _codes(rotation.sum(axis=2) + shift, paired[group])
    kinds = _kinds(codes, rotation)
    cells = np.full((n_groups, 27), -1, dtype=np.int64)
    for fill in (True, False):  # fill the parents' nodes from their children, then check that the children agree
        for rows in kinds:
            child, node = _parent_nodes(rotation[rows[0]], shift[rows[0]], paired[group[rows[0]]])
            at = (group[rows][:, None], node[None, :])
            if fill:
                cells[at] = mesh.cells[rows[:, None], child[None, :]]
            elif (cells[at] != mesh.cells[rows[:, None], child[None, :]]).any():
                return None
    if (cells < 0).any():
        return None
    vertices = members(cells[:, VERTEX_NODES], mesh.n_nodes)
    renumber = np.full(mesh.n_nodes, -1, dtype=np.int64)
    renumber[vertices] = np.arange(len(vertices))
    is_vertex = renumber >= 0
    if is_vertex[np.delete(cells, VERTEX_NODES, axis=1)].any():
        return None  # a node that is a vertex of one parent and not of another
    used = members(cells, mesh.n_nodes)
    others = used[~is_vertex[used]]
    renumber[others] = len(vertices) + np.arange(len(others))
    cells = renumber[cells]
    if not _conforming(cells):
        return None
    points = mesh.points[np.concatenate([vertices, others])]
    pressure_cells = cells[:, VERTEX_NODES]
    coarse = _finish(
        points,
        cells,
        pressure_cells,
        np.arange(len(vertices)),
        points[cells],
        greedy_colouring(pressure_cells),
        np.arange(n_groups),
        {},
        lambda keys: np.full(len(keys), -1),
        check_geometry=False,
    )
    return Coarsening(coarse, coarse.elements_with_ids(group), codes, rotation.astype(np.int8))


def _kinds(codes, rotation) -> list:
    """The elements (index arrays) of each kind of child (:func:`child_kinds`)."""
    key = child_kinds(codes, rotation)
    order = np.argsort(key, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(key[order])) + 1)


def _parent_nodes(rotation, shift, paired) -> tuple[np.ndarray, np.ndarray]:
    """(child's Q2 nodes, the parent's Q2 nodes there): the nodes of a child turned by
    ``rotation`` (3, 3) and shifted by ``shift`` (3,) in the parent lattice that are nodes of
    its parent, whose axes ``paired`` (3,) hold two children (lattice 0..4) or one (0..2)."""
    lattice = Q2.node_indices @ rotation.T + shift  # (27, 3)
    step = np.where(paired, 2, 1)
    child = np.flatnonzero((lattice % step == 0).all(axis=1))
    index = lattice[child] // step
    return child, index[:, 0] + 3 * index[:, 1] + 9 * index[:, 2]


def _conforming(cells: np.ndarray) -> bool:
    """Elements with Q2 nodes ``cells`` (G, 27) meet conformingly: the elements on one edge
    (two vertices) share its middle node, those on one face (four vertices) its centre node,
    and a face has at most two elements."""
    edges = cells[:, EDGE_NODES]  # (G, 12, 3)
    keys = np.sort(edges[:, :, [0, 2]], axis=2).reshape(-1, 2)
    _, inverse, counts = unique_rows(keys)
    if not _agree(inverse, len(counts), edges[:, :, 1].ravel()):
        return False
    faces = cells[:, Q2_FACE_NODES]  # (G, 6, 9)
    keys = np.sort(faces[:, :, [0, 2, 6, 8]], axis=2).reshape(-1, 4)
    _, inverse, counts = unique_rows(keys)
    return bool((counts <= 2).all()) and _agree(inverse, len(counts), faces[:, :, 4].ravel())


def _agree(inverse, n, values) -> bool:
    """Every class of ``inverse`` (m,) among n holds one value of ``values`` (m,)."""
    low, high = np.full(n, np.iinfo(np.int64).max), np.full(n, -1)
    np.minimum.at(low, inverse, values)
    np.maximum.at(high, inverse, values)
    return bool((low == high).all())
