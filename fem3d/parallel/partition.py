"""Elements partitioned across ranks, and how each rank's unknowns relate to the global ones.

Every rank holds the global mesh topology of a mesh read from a file (cheap next to the
element matrices), partitions it the same way and keeps only its own elements; a
structured box's rank builds its own slab alone (:func:`box_part`), a refined mesh's rank
its parents' children alone (:func:`refined_part`). Either way a rank's part is a local
HexMesh whose unknowns are the entries its elements touch, in the same block layout
[u | v | w | p].
Entries on the interface between ranks are copies: after a local element-by-element
sum, :meth:`Distribution.sum_interface` adds the neighbours' partial sums (point to
point, interface entries only), so every copy holds the full value. Each unknown is
owned by the lowest rank touching it; dot products sum owned entries and then reduce
over the ranks.

One process is the same code with :meth:`Distribution.serial` (no interface, every
entry owned, a no-op communicator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucfd.sets import distinct, members
from .comm import SerialComm
from gpucfd.errors import InputError
from ..kernels import interface
from ..discretisation.mesh import CHUNK, Box, HexMesh, LazyMesh, grid_block, grid_index

AXES = "xyz"
FACE_NODES = 9  # Q2 nodes two hexahedra share across a face (3 across an edge, 1 at a corner)


def slab_layers(grid, parts: int, align: int = 1) -> tuple[int, np.ndarray]:
    """(axis, owner) of a structured box of ``grid`` elements per side cut into ``parts``
    slabs across its longest axis: the rank of each element layer along it (grid[axis],).
    Slabs hold whole units of ``align`` element layers (multigrid keeps parents and children
    on one rank) and differ by at most one unit."""
    axis = int(np.argmax(grid))
    layers = int(grid[axis])
    units = layers // align
    if parts > units:
        what = f"{layers} element layers along {AXES[axis]}" + (
            f" (in {units} blocks of {align} for multigrid)" if align > 1 else ""
        )
        raise InputError(f"{parts} ranks but the mesh has only {what}; start at most {units} ranks")
    return axis, ((np.arange(layers) // align) * parts) // units


def slab_owners(grid, parts: int, align: int = 1) -> np.ndarray:
    """(nx*ny*nz,) rank of each element (by element id i + nx (j + ny k)) of a structured
    box cut into ``parts`` slabs (:func:`slab_layers`)."""
    axis, owner = slab_layers(grid, parts, align)
    return owner[grid_index(np.arange(int(np.prod(grid))), grid)[axis]]


def partition_elements(mesh: HexMesh, parts: int, align: int = 1) -> np.ndarray:
    """(E,) rank of each element.

    A refined mesh (fem3d.discretisation.refine) takes the partition of the mesh it refines: children
    stay on their parent's rank. Structured boxes are cut into slabs of whole element
    layers across their longest axis (fem3d.parallel.partition.slab_owners; ``align`` layers per
    unit); other meshes by METIS on their element graph (:func:`graph_parts`).
    """
    if parts == 1:
        return np.zeros(mesh.n_elements, dtype=np.int64)
    if mesh.coarser is not None:
        return partition_elements(mesh.coarser, parts, align)[mesh.parent]
    if mesh.grid is not None:
        return slab_owners(mesh.grid, parts, align)[mesh.element_ids]
    if parts > mesh.n_elements:
        raise InputError(
            f"{parts} ranks but the mesh has only {mesh.n_elements} elements; start at most {mesh.n_elements} ranks"
        )
    return graph_parts(mesh, parts)


def element_graph(mesh: HexMesh) -> tuple[np.ndarray, np.ndarray]:
    """(xadj (E+1,), adjncy) int64: the elements of ``mesh`` that share a face with each
    (9 Q2 nodes), in METIS's compressed rows, both directions, no self loops."""
    import scipy.sparse as sp

    e, k = mesh.cells.shape
    incidence = sp.csr_matrix(
        (np.ones(mesh.cells.size, dtype=np.int32), (np.repeat(np.arange(e), k), mesh.cells.ravel())),
        shape=(e, mesh.n_nodes),
    )
    shared = (incidence @ incidence.T).tocsr()  # Q2 nodes each pair of elements shares
    shared.setdiag(0)
    shared.data[shared.data < FACE_NODES] = 0
    shared.eliminate_zeros()
    shared.sort_indices()
    return shared.indptr.astype(np.int64), shared.indices.astype(np.int64)


def graph_parts(mesh: HexMesh, parts: int) -> np.ndarray:
    """(E,) rank of each element of ``mesh`` from METIS (pymetis) on its face graph
    (:func:`element_graph`), fixed seed: every rank finds the same partition. On the DFG
    channel the most interface unknowns of a rank are 1.3, 1.5 and 1.8 times fewer than by
    recursive coordinate bisection on 4, 8 and 16 ranks (scripts/partition_quality.py).
    InputError without pymetis or where a rank would get no element."""
    try:
        import pymetis
    except ImportError:
        raise InputError(
            f"{parts} ranks on a mesh that is not a box need pymetis to partition it: pip install pymetis"
        ) from None
    xadj, adjncy = element_graph(mesh)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis 2025.2 and later
        graph = {"adjacency": pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    _, membership = pymetis.part_graph(parts, **graph, options=pymetis.Options(seed=0))
    part = np.asarray(membership, dtype=np.int64)
    empty = np.flatnonzero(np.bincount(part, minlength=parts) == 0)
    if empty.size:
        raise InputError(
            f"partitioning the mesh's {mesh.n_elements} elements for {parts} ranks leaves rank {empty[0]} without "
            "elements; start fewer ranks"
        )
    return part


def submesh(mesh: HexMesh, elements: np.ndarray):
    """The mesh of ``elements`` (global indices, in colour order: the local elements in
    this order) with local numbering.

    Returns (local HexMesh, nodes, pressure): the global Q2 node and pressure node of
    each local one. Boundary faces are the global mesh's (interfaces between ranks are
    not boundary); a refined mesh's parents stay elements of the whole coarser mesh.
    """
    cells = mesh.cells[elements]
    nodes = members(cells, mesh.n_nodes)
    pcells = mesh.pressure_cells[elements]
    pressure = members(pcells, mesh.n_pressure)
    colour = np.repeat(np.arange(mesh.n_colours), np.diff(mesh.colour_offsets))[elements]
    counts = np.bincount(colour, minlength=mesh.n_colours)
    keep = np.isin(mesh.boundary_faces[:, 0], elements)
    faces = mesh.boundary_faces[keep].copy()
    faces[:, 0] = _numbering(elements, mesh.n_elements)[faces[:, 0]]
    node_of = _numbering(nodes, mesh.n_nodes)
    local = HexMesh(
        points=mesh.points[nodes],
        cells=node_of[cells],
        pressure_cells=_numbering(pressure, mesh.n_pressure)[pcells],
        pressure_nodes=node_of[mesh.pressure_nodes[pressure]],
        geometry=mesh.geometry[elements],
        colour_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        element_ids=mesh.element_ids[elements],
        boundary_faces=faces,
        boundary_tags=mesh.boundary_tags[keep],
        tag_names=dict(mesh.tag_names),
        grid=mesh.grid,
        coarser=mesh.coarser,
        parent=None if mesh.parent is None else mesh.parent[elements],
        child_position=None if mesh.child_position is None else mesh.child_position[elements],
        whole=mesh.whole or mesh,
    )
    return local, nodes, pressure


def _numbering(kept: np.ndarray, n: int) -> np.ndarray:
    """(n,) int64 local index of each of n global indices among ``kept`` (-1 elsewhere)."""
    out = np.full(n, -1, dtype=np.int64)
    out[kept] = np.arange(len(kept))
    return out


class Distribution:
    """This rank's unknowns among all ranks'.

    comm     communicator (fem3d.parallel.comm)
    gdofs    (n,) int64 global unknown of each local one (host; on one process the identity,
             made at the first use)
    owned    (n,) bool, True where this rank owns the unknown (host; on one process all,
             made at the first use)
    shared   {peer: (m,) local indices of the unknowns shared with peer, in increasing
             global order (the same order on both sides)}
    weights  (n,) float64 on the backend: 1 at owned entries, else 0 (weighted dot products;
             made at the first use: on one process only the paper solver's CG uses it)
    sums, values_sent  interface sums done so far and the entries they sent
    """

    def __init__(self, comm, backend, gdofs, owned, shared: dict, n_global: int):
        self.comm = comm
        self.backend = backend
        self._gdofs = None if gdofs is None else np.asarray(gdofs, dtype=np.int64)
        self._owned = None if owned is None else np.asarray(owned, dtype=bool)
        self.shared = {q: np.asarray(i, dtype=np.int64) for q, i in sorted(shared.items())}
        self.n_global = int(n_global)
        self.n = self.n_global if gdofs is None else len(self._gdofs)
        self._weights = None
        self.sums = self.values_sent = 0
        self._gathered_gdofs = {}
        self._plan()

    def _plan(self) -> None:
        """What :meth:`sum_interface` sends (the shared entries of each peer, concatenated
        in peer order; it receives the same layout) and how it adds the partial sums:
        fem3d.kernels.interface's (iface, ptr, src), in increasing rank order per entry."""
        peers = list(self.shared)
        sizes = [len(self.shared[q]) for q in peers]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._blocks = {q: (int(offsets[k]), int(offsets[k + 1])) for k, q in enumerate(peers)}
        send = np.concatenate([self.shared[q] for q in peers]) if peers else np.zeros(0, np.int64)
        iface = distinct(send)
        m = len(iface)
        slot = np.concatenate([np.arange(m)] + [np.searchsorted(iface, self.shared[q]) for q in peers])
        rank = np.concatenate([np.full(m, self.comm.rank)] + [np.full(n, q) for q, n in zip(peers, sizes)])
        src = np.concatenate([np.full(m, -1)] + [np.arange(*self._blocks[q]) for q in peers])
        order = np.lexsort((rank, slot))
        ptr = np.concatenate([[0], np.cumsum(np.bincount(slot, minlength=m))])
        self.interface = iface
        self._host = {"send": send, "iface": iface, "ptr": ptr, "src": src[order]}
        self._dev = {
            k: self.backend.asarray(v, dtype=np.int32 if k != "send" else np.int64) for k, v in self._host.items()
        }
        self._buffers = None

    @property
    def gdofs(self) -> np.ndarray:
        if self._gdofs is None:
            self._gdofs = np.arange(self.n, dtype=np.int64)
        return self._gdofs

    @property
    def owned(self) -> np.ndarray:
        if self._owned is None:
            self._owned = np.ones(self.n, dtype=bool)
        return self._owned

    @property
    def weights(self):
        if self._weights is None:
            self._weights = self.backend.asarray(self.owned.astype(np.float64))
        return self._weights

    @classmethod
    def serial(cls, backend, n: int) -> "Distribution":
        return cls(SerialComm(), backend, None, None, {}, n)  # gdofs and owned made where asked for

    @property
    def is_serial(self) -> bool:
        return self.comm.size == 1

    def sum_interface(self, v):
        """Complete the interface entries of the partial sums ``v`` (n, ...) in place: every
        copy becomes the sum of all ranks' partial sums, added in increasing rank order,
        so the copies agree to the last bit. Device vectors (n,) use preallocated buffers
        and stay asynchronous with NCCL; host arrays of any trailing shape work too."""
        return self.end_sum(v, self.begin_sum(v))

    def begin_sum(self, v):
        """Start :meth:`sum_interface` of ``v``, whose interface entries are final here: the
        shared entries are sent (the device goes on with what is queued after this).
        Returns what :meth:`end_sum` completes; one started sum of a device vector (n,) at a
        time (its buffers are reused)."""
        if not self.shared:
            return None
        self.sums += 1
        plan = self._host if isinstance(v, np.ndarray) else self._dev
        if v.ndim == 1 and not isinstance(v, np.ndarray):
            if self._buffers is None:
                self._buffers = tuple(self.backend.xp.empty(len(plan["send"]), dtype=np.float64) for _ in range(2))
            send, recv = self._buffers
            self.backend.xp.take(v, plan["send"], out=send)
        else:
            send = v[plan["send"]]
            recv = np.empty_like(send) if isinstance(v, np.ndarray) else self.backend.xp.empty_like(send)
        self.values_sent += int(send.size)
        pending = self.comm.start_exchange(
            {q: send[a:b] for q, (a, b) in self._blocks.items()}, {q: recv[a:b] for q, (a, b) in self._blocks.items()}
        )
        return plan, send, recv, pending

    def end_sum(self, v, started):
        """Complete the sum :meth:`begin_sum` started (None: nothing to do); returns ``v``."""
        if started is None:
            return v
        plan, _, recv, pending = started
        self.comm.finish_exchange(pending)
        interface.for_array(v)(v, plan["iface"], recv, plan["ptr"], plan["src"])
        return v

    def allreduce(self, buf):
        """Sum the float64 array ``buf`` over the ranks, in place."""
        return self.comm.allreduce(buf)

    def allreduce_scalar(self, value: float) -> float:
        return self.comm.allreduce_scalar(value)

    def owned_part(self, v):
        """``v`` with the entries that other ranks own set to zero (``v`` itself on one
        process): the factor of a local product that counts every unknown once."""
        return v if self.is_serial else self.weights * v

    def dot(self, a, b) -> float:
        """Global dot product of two complete local vectors (owned entries count)."""
        return self.comm.allreduce_scalar(float(self.owned_part(a) @ b))

    def norm(self, v) -> float:
        return math.sqrt(self.dot(v, v))

    def gather(self, x_local: np.ndarray, everyone: bool = False):
        """The global vector from every rank's complete local host vector: on rank 0 (None
        elsewhere), or with ``everyone`` on every rank. The global unknowns of every rank's
        entries are gathered once per Distribution and kind."""
        if self.is_serial:
            return x_local
        if everyone not in self._gathered_gdofs:
            self._gathered_gdofs[everyone] = self.comm.gatherv(self.gdofs, everyone)
        values = self.comm.gatherv(np.asarray(x_local, dtype=np.float64), everyone)
        if values is None:
            return None
        out = np.empty(self.n_global, dtype=np.float64)
        out[self._gathered_gdofs[everyone]] = values
        return out

    def exchange(self, sends: dict, recvs: dict) -> None:
        """Send the float64 array sends[peer] to each peer and receive recvs[peer] from it
        (same shapes both ways; device or host arrays)."""
        self.comm.exchange(sends, recvs)

    def exchange_objects(self, sends: dict) -> dict:
        """Send a Python object to each peer of ``sends``; returns what each sent back."""
        return self.comm.exchange_objects(sends)


@dataclass
class Partition:
    """This rank's part of a mesh: the local mesh, its Distribution, and for each local
    Q2 node and element its global index (host arrays; elements in the local order:
    colour by colour, each colour's interface elements first, :func:`distribute_owned`)."""

    mesh: HexMesh
    dist: Distribution
    nodes: np.ndarray
    elements: np.ndarray


def distribute(mesh: HexMesh, comm, backend, align: int = 1) -> Partition:
    """This rank's part of ``mesh`` among ``comm.size`` ranks (every rank calls it);
    ``align``: see :func:`partition_elements`."""
    if comm.size == 1:
        return Partition(
            mesh, Distribution.serial(backend, mesh.n_dofs), np.arange(mesh.n_nodes), np.arange(mesh.n_elements)
        )
    if isinstance(mesh, LazyMesh) and not mesh.built:  # from this rank's slab or parents (made arrays are cut)
        if isinstance(mesh, Box):
            return box_part(mesh.grid, mesh.box_vertices, comm, backend, align)
        return refined_part(mesh, comm, backend, align)
    return distribute_owned(mesh, partition_elements(mesh, comm.size, align), comm, backend)


def box_part(grid, vertices, comm, backend, align: int = 1) -> Partition:
    """This rank's part of the structured box of ``grid`` elements with vertex coordinates
    ``vertices`` (three arrays) cut into slabs (:func:`slab_layers`), built from its own element
    layers alone (fem3d.discretisation.mesh.box_piece), not from the whole box: the Partition
    distribute_owned cuts from box_mesh(*grid, vertices=vertices) with the slab owners, its
    mesh's ``whole`` None (collective). A slab shares with the slabs beside it exactly the
    nodes of its two end planes, each owned by the lower rank; the elements on those planes
    come first in each colour (distribute_owned's order)."""
    from ..discretisation.mesh import box_block_ids, box_order, box_piece

    n = [int(v) for v in grid]
    axis, owner = slab_layers(n, comm.size, align)
    mine = np.flatnonzero(owner == comm.rank)
    lo, hi = [0, 0, 0], list(n)
    lo[axis], hi[axis] = int(mine[0]), int(mine[-1]) + 1
    ids = box_block_ids(n, lo, hi)  # the slab's elements colour by colour
    e = grid_index(ids, n)
    ends = [(lo[axis], 0, int(owner[lo[axis] - 1]))] if lo[axis] > 0 else []  # (layer, plane, peer) of each end
    ends += [(hi[axis] - 1, hi[axis] - lo[axis], int(owner[hi[axis]]))] if hi[axis] < n[axis] else []
    inner = np.ones(len(ids), dtype=bool)
    for layer, _, _ in ends:
        inner &= e[axis] != layer
    order = np.lexsort((np.arange(len(ids)), inner, e[0] % 2 + 2 * (e[1] % 2) + 4 * (e[2] % 2)))
    local, nodes, pressure = box_piece(n, vertices, lo, hi, ids[order])
    faces = np.argsort(6 * order[local.boundary_faces[:, 0]] + local.boundary_faces[:, 1])  # distribute_owned's order
    local.boundary_faces, local.boundary_tags = local.boundary_faces[faces], local.boundary_tags[faces]
    size = [b - a for a, b in zip(lo, hi)]
    n_nodes, n_pressure = int(np.prod([2 * v + 1 for v in n])), int(np.prod([v + 1 for v in n]))
    m = len(nodes)
    gdofs = np.concatenate([nodes, nodes + n_nodes, nodes + 2 * n_nodes, pressure + 3 * n_nodes])
    owned, shared = np.ones(len(gdofs), dtype=bool), {}
    for _, plane, peer in ends:
        at = [
            _plane_indices([2 * v + 1 for v in size], axis, 2 * plane),
            _plane_indices([v + 1 for v in size], axis, plane),
        ]
        idx = np.concatenate([at[0] + d * m for d in range(3)] + [at[1] + 3 * m])
        shared[peer] = idx[np.argsort(gdofs[idx], kind="stable")]
        owned[idx] = peer > comm.rank  # the lowest rank touching an unknown owns it
    dist = Distribution(comm, backend, gdofs, owned, shared, 3 * n_nodes + n_pressure)
    comm.connect(dist.shared)
    return Partition(local, dist, nodes, box_order(n, local.element_ids))


def _plane_indices(shape, axis: int, at: int) -> np.ndarray:
    """(k,) int64 the indices (x fastest) of the points of a block of ``shape`` (x, y, z) points
    whose index along ``axis`` is ``at``, increasing."""
    r = [np.arange(v) for v in shape]
    r[axis] = np.array([at])
    return grid_block(r, shape).ravel()


def peer_touches(cells: np.ndarray, n: int, part: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, ranks) (k,) int64: the distinct pairs of a node of ``rank``'s elements and another
    rank whose elements touch it too, for the element nodes ``cells`` (E, c) numbered in
    [0, n) and the elements' ranks ``part`` (E,); ordered by rank, then node. Only the
    elements of other ranks that touch this rank's nodes are looked at, not a node-by-rank
    table of the whole mesh."""
    own, halo = _halo(lambda at: cells[at], len(cells), n, part, rank)
    return _touched_by(own, cells[halo], part[halo], n)


def _halo(cells_of, n_elements: int, n: int, part: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, halo) int64: the nodes of ``rank``'s elements (sorted) and the elements of other
    ranks that touch one of them, for elements on the ranks ``part`` (n_elements,) whose nodes
    (numbered in [0, n)) ``cells_of(at)`` gives for an index array or slice ``at``, read
    CHUNK elements at a time."""
    own = np.zeros(n, dtype=bool)
    own[cells_of(np.flatnonzero(part == rank))] = True
    near = [own[cells_of(slice(a, a + CHUNK))].any(axis=1) for a in range(0, n_elements, CHUNK)]
    return np.flatnonzero(own), np.flatnonzero((part != rank) & np.concatenate(near or [np.zeros(0, dtype=bool)]))


def _touched_by(nodes: np.ndarray, theirs: np.ndarray, ranks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, ranks) (k,) int64, by rank then node: the distinct pairs of a node of ``nodes``
    (sorted, among ``n``) and the rank ``ranks`` (h,) of an element of another rank whose nodes
    ``theirs`` (h, c) hold it (peer_touches from the elements around a part)."""
    flat = theirs.ravel()
    hit = nodes[np.minimum(np.searchsorted(nodes, flat), len(nodes) - 1)] == flat
    key = distinct(np.repeat(ranks, theirs.shape[1])[hit] * np.int64(n) + flat[hit])
    return key % n, key // n


def distribute_owned(mesh: HexMesh, part: np.ndarray, comm, backend) -> Partition:
    """This rank's part of ``mesh`` whose elements are on the ranks ``part`` (E,). Its
    elements keep the colour order, each colour's interface elements (those touching a
    node or pressure node of another rank's element) first: a product computes them, starts
    the interface sum and computes the interior ones meanwhile
    (fem3d.solvers.operators.ElementOperator)."""
    if comm.size == 1:
        return distribute(mesh, comm, backend)
    rank = comm.rank
    mine = np.flatnonzero(part == rank)
    node_peers = peer_touches(mesh.cells, mesh.n_nodes, part, rank)
    pressure_peers = peer_touches(mesh.pressure_cells, mesh.n_pressure, part, rank)
    shared_node, shared_pressure = np.zeros(mesh.n_nodes, dtype=bool), np.zeros(mesh.n_pressure, dtype=bool)
    shared_node[node_peers[0]], shared_pressure[pressure_peers[0]] = True, True
    inner = ~(shared_node[mesh.cells[mine]].any(axis=1) | shared_pressure[mesh.pressure_cells[mine]].any(axis=1))
    colour = np.searchsorted(mesh.colour_offsets, mine, side="right")
    elements = mine[np.lexsort((mine, inner, colour))]
    local, nodes, pressure = submesh(mesh, elements)
    dist = _peer_distribution(comm, backend, nodes, pressure, node_peers, pressure_peers, mesh.n_nodes, mesh.n_pressure)
    return Partition(local, dist, nodes, elements)


def _peer_distribution(comm, backend, nodes, pressure, node_peers, pressure_peers, n: int, npr: int) -> Distribution:
    """The Distribution of a part whose global Q2 nodes and pressure nodes are ``nodes`` and
    ``pressure`` (sorted) among ``n`` and ``npr``, the (node, rank) pairs of its nodes that
    other ranks' elements touch ``node_peers`` and ``pressure_peers`` (:func:`peer_touches`)
    (collective: connects the peers)."""
    node_at, pressure_at = np.searchsorted(nodes, node_peers[0]), np.searchsorted(pressure, pressure_peers[0])
    m = len(nodes)
    gdofs = np.concatenate([nodes, nodes + n, nodes + 2 * n, pressure + 3 * n])
    at = np.concatenate([node_at + d * m for d in range(3)] + [pressure_at + 3 * m])  # local unknowns of the pairs
    peer = np.concatenate([node_peers[1]] * 3 + [pressure_peers[1]])
    owner = np.full(len(gdofs), comm.rank)
    np.minimum.at(owner, at, peer)  # the lowest rank touching an unknown owns it
    shared = {}
    for q in distinct(peer).tolist():
        idx = at[peer == q]
        shared[q] = idx[np.argsort(gdofs[idx], kind="stable")]
    dist = Distribution(comm, backend, gdofs, owner == comm.rank, shared, 3 * n + npr)
    comm.connect(shared)
    return dist


def refined_part(mesh, comm, backend, align: int = 1) -> Partition:
    """This rank's part of ``mesh`` (fem3d.discretisation.refine.Refined: a whole mesh refined
    once, its arrays not made), its children on their parents' ranks (partition_elements),
    built from the rank's parents alone: the Partition distribute_owned cuts from the whole
    refined mesh, its mesh's ``whole`` ``mesh`` (collective). A fine node is shared with
    another rank where it lies in one of that rank's parents (in its 5 x 5 x 5 lattice); a
    pressure node, a coarse Q2 node, where one of that rank's parents has it."""
    from ..discretisation.refine import CHILD_LATTICE, CHILD_VERTICES

    coarse, rank = mesh.coarser, comm.rank
    owner = partition_elements(coarse, comm.size, align)
    mine = np.flatnonzero(owner == rank)
    own_cells = coarse.cells_of(mine)
    # a fine pressure node is a coarse Q2 node; the halo: the other ranks' parents touching this rank's
    pressure, halo = _halo(coarse.cells_of, coarse.n_elements, coarse.n_nodes, owner, rank)
    halo_cells = coarse.cells_of(halo)
    lattice = mesh.lattice_of(mine)  # (m, 125)
    nodes = distinct(lattice)
    node_peers = _touched_by(nodes, mesh.lattice_of(halo), owner[halo], mesh.n_nodes)
    pressure_peers = _touched_by(pressure, halo_cells, owner[halo], coarse.n_nodes)

    parents, positions = np.repeat(mine, 8), np.tile(np.arange(8), len(mine))
    cells = np.searchsorted(nodes, lattice)[np.repeat(np.arange(len(mine)), 8)[:, None], CHILD_LATTICE[positions]]
    vertices = np.take_along_axis(np.repeat(own_cells, 8, axis=0), CHILD_VERTICES[positions], axis=1)
    pressure_cells = np.searchsorted(pressure, vertices)
    shared_node, shared_pressure = np.zeros(len(nodes), dtype=bool), np.zeros(len(pressure), dtype=bool)
    shared_node[np.searchsorted(nodes, node_peers[0])] = True
    shared_pressure[np.searchsorted(pressure, pressure_peers[0])] = True
    inner = ~(shared_node[cells].any(axis=1) | shared_pressure[pressure_cells].any(axis=1))
    elements = mesh.element_of(parents, positions)
    colour = np.searchsorted(mesh.colour_offsets, elements, side="right") - 1
    order = np.lexsort((elements, inner, colour))  # distribute_owned's order
    elements, parents, positions = elements[order], parents[order], positions[order]

    faces, tags = mesh.boundary_faces, mesh.boundary_tags  # the whole boundary's: ~N^(2/3)
    keep = np.flatnonzero(owner[mesh.place(faces[:, 0])[0]] == rank)
    by_element = np.argsort(elements)
    faces = np.stack([by_element[np.searchsorted(elements, faces[keep, 0], sorter=by_element)], faces[keep, 1]], axis=1)
    local = HexMesh(
        points=mesh.points_of(nodes),
        cells=cells[order],
        pressure_cells=pressure_cells[order],
        pressure_nodes=np.searchsorted(nodes, pressure),
        geometry=mesh.geometry_of(elements),
        colour_offsets=np.concatenate([[0], np.cumsum(np.bincount(colour, minlength=mesh.n_colours))]).astype(np.int64),
        element_ids=8 * coarse.element_ids[parents] + positions,
        boundary_faces=faces,
        boundary_tags=tags[keep],
        tag_names=dict(mesh.tag_names),
        coarser=coarse,
        parent=parents,
        child_position=positions,
        whole=mesh,
    )
    dist = _peer_distribution(comm, backend, nodes, pressure, node_peers, pressure_peers, mesh.n_nodes, mesh.n_pressure)
    return Partition(local, dist, nodes, elements)
