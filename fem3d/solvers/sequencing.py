"""Mesh sequencing: the nonlinear problem solved on coarser nested meshes first, each solution
interpolated to the next finer mesh as its initial guess, so that the finest mesh, where a
Newton step costs most, takes only the few steps that refine a close guess (grid
sequencing: Knoll & Keyes, J. Comput. Phys. 193 (2004) 357, section 3.4; PETSc's
-snes_grid_sequence).

The meshes are those of the multigrid hierarchy (fem3d.solvers.multigrid) in their true
geometry: a refined mesh's ``coarser`` (fem3d.discretisation.refine), and below a structured
box the coarser box of fem3d.solvers.multigrid.box_coarsening with its vertices at the fine
box's (graded) vertex coordinates. Every child element is an axis-aligned box of its parent's
reference cube: xi_parent = scale * xi_child + shift along each axis, so interpolating the
parent's Q2 velocity and Q1 pressure at the child's nodes is exact: a coarse solution is a
fine-mesh field.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucfd.errors import InputError, check_range
from ..discretisation.element import Q1, Q2, lagrange_values
from ..discretisation.mesh import HexMesh, box_mesh, element_dofs, grid_index
from .multigrid import REFINED, child_boxes, split

SEQUENCE_MIN = {  # elements of the coarsest mesh that --sequence auto solves, by device kind: where a coarse solve
    "gpu": 1000,  # stops paying for itself (a GPU's small solves cost their launches whatever the mesh; a CPU's steps
    "cpu": 200,  # cost in proportion to the elements). Measurements: docs/solvers.md, mesh sequencing
}
REDUNDANT_MAX = 131072  # coarser meshes of at most this many elements are solved whole on every rank, not cut among the
# ranks: their steps are launch- and message-bound (docs/solvers.md, mesh sequencing)
CHUNK = 65536  # elements per batch of the interpolation


@dataclass
class Coarsening:
    """A mesh's next coarser mesh ``coarse`` in its true geometry, and where the mesh's
    elements lie in it (:meth:`at`): for a refined mesh its refinement (``layers`` None), for
    a box of ``grid`` elements per side, along each axis each element layer's parent layer,
    scale and shift (``layers``: three (parent, scale, shift) of arrays (n_d,))."""

    coarse: HexMesh
    grid: tuple | None = None
    layers: list | None = None

    def at(self, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(parent (m,), scale (m, 3), shift (m, 3)) of the fine elements of element_ids
        ``ids`` (m,): each one's parent (an element index of ``coarse``) and its place there,
        the parent's reference coordinates being scale * xi + shift along each axis at the
        element's reference xi. From the ids alone: no array over the whole fine mesh."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.layers is None:  # refined: child c of the element of id k has id 8 k + c
            return (self.coarse.elements_with_ids(ids // 8), *child_boxes(REFINED[ids % 8]))
        e = grid_index(ids, self.grid)
        parent, scale, shift = (np.stack([t[k][i] for t, i in zip(self.layers, e)], axis=1) for k in range(3))
        cx, cy, _ = self.coarse.grid
        return self.coarse.elements_with_ids(parent[:, 0] + cx * (parent[:, 1] + cy * parent[:, 2])), scale, shift


def coarsening(mesh: HexMesh) -> Coarsening | None:
    """The next coarser mesh of the whole mesh ``mesh``: the mesh it refines, else the
    coarser box of a structured box; None for a mesh that is neither."""
    if mesh.coarser is not None:
        return Coarsening(mesh.coarser)
    vertices = mesh.box_vertices
    if mesh.grid is None or vertices is None:
        return None  # not a whole box
    layers, coarse_vertices = [], []
    for v in vertices:  # each layer's parent layer, then the layers' extents along the axis
        p = split(len(v) - 1)[0]
        w = v[np.append(np.flatnonzero(np.diff(p, prepend=-1)), len(p))]  # the fine vertices the coarse box keeps
        lo, hi, plo, phi = v[:-1], v[1:], w[p], w[p + 1]
        layers.append((p, (hi - lo) / (phi - plo), (hi + lo - phi - plo) / (phi - plo)))
        coarse_vertices.append(w)
    grid = tuple(len(w) - 1 for w in coarse_vertices)
    if grid == tuple(mesh.grid):
        return None  # no coarser box
    return Coarsening(box_mesh(*grid, vertices=coarse_vertices), tuple(mesh.grid), layers)


def chain(mesh: HexMesh, levels: int, min_elements: int = 1) -> list[Coarsening]:
    """Up to ``levels`` successive coarsenings of ``mesh`` (finest first), each coarse mesh
    of at least ``min_elements`` elements."""
    out, fine = [], mesh
    while len(out) < levels and (c := coarsening(fine)) is not None and c.coarse.n_elements >= min_elements:
        out.append(c)
        fine = c.coarse
    return out


def interpolate(xp, x, fine: HexMesh, c: Coarsening, part=None):
    """The vector [u | v | w | p] float64 of the fine mesh holding the fields of the coarse
    mesh's vector ``x`` (c.coarse.n_dofs,): each element's velocity and pressure at its nodes
    from its parent's Q2 and Q1 interpolants, axis by axis (sum factorisation). Returns
    (fine.n_dofs,), or with ``part`` (a fem3d.parallel.partition.Partition of ``fine``) only
    that rank's part, (part.dist.n,) in its local numbering: each rank interpolates its own
    elements."""
    x = xp.asarray(x, dtype=np.float64)
    local, n = (fine, fine.n_dofs) if part is None else (part.mesh, part.dist.n)
    out = xp.empty(n, dtype=np.float64)
    for s in range(0, local.n_elements, CHUNK):
        parent, scale, shift = c.at(local.element_ids[s : s + CHUNK])
        cells, pressure_cells = (xp.asarray(a) for a in (c.coarse.cells_of(parent), c.coarse.pressure_cells_of(parent)))
        parent_values = x[element_dofs(xp, cells, pressure_cells, c.coarse.n_nodes)]  # (m, 89)
        m = parent_values.shape[0]
        scale, shift = xp.asarray(scale), xp.asarray(shift)
        velocity = _tensor_interpolate(xp, parent_values[:, :81].reshape(m, 3, 3, 3, 3), _tables(xp, Q2, scale, shift))
        pressure = _tensor_interpolate(xp, parent_values[:, 81:].reshape(m, 1, 2, 2, 2), _tables(xp, Q1, scale, shift))
        at = slice(s, s + m)
        local_cells = [xp.asarray(a) for a in (local.cells_of(at), local.pressure_cells_of(at))]
        out[element_dofs(xp, *local_cells, local.n_nodes)] = xp.concatenate(
            [velocity.reshape(m, 81), pressure.reshape(m, 8)], axis=1
        )
    return out


def _tables(xp, element, scale, shift):
    """(m, 3, k, k) the 1D basis of ``element`` (k nodes per axis) along each axis at each
    child node's parent coordinate, for the children's ``scale`` and ``shift`` (m, 3) (arrays
    of ``xp``): [element, axis, child node, parent node] (Lagrange's products, made where
    the arrays are)."""
    nodes = element.nodes_1d
    t = scale[:, :, None] * xp.asarray(nodes) + shift[:, :, None]  # (m, 3, k) the child's nodes in the parent
    return lagrange_values(nodes, t, xp)


def _tensor_interpolate(xp, values, L):
    """values (m, f, k, k, k) nodal values of f fields per element, nodes [c][b][a] (tensor
    order, a along xi); L from :func:`_tables`. Returns the same layout at the child's nodes."""
    v = xp.einsum("eia,efcba->efcbi", L[:, 0], values)
    v = xp.einsum("ejb,efcbi->efcji", L[:, 1], v)
    return xp.einsum("ekc,efcji->efkji", L[:, 2], v)


SEQUENCE_MAX = 10  # coarser meshes --sequence may name


def plan(spec: str, mesh: HexMesh, kind: str, usable=lambda coarse: True) -> list[Coarsening]:
    """The coarsenings of ``mesh`` (finest first) whose meshes --sequence ``spec`` solves first
    on device kind ``kind`` ("cpu" or "gpu"): "none"; "auto": every coarser mesh of at least
    SEQUENCE_MIN[kind] elements, whatever the number of ranks (those of at most REDUNDANT_MAX
    elements are solved whole on every rank: :func:`redundant`); a count K,
    0 to SEQUENCE_MAX: up to K coarser meshes. The chain ends before the first coarse mesh
    that is not ``usable(coarse)``. InputError for another ``spec``."""
    levels, least = limits(spec, kind)
    out = []
    for c in chain(mesh, levels, least):
        if not usable(c.coarse):
            break
        out.append(c)
    return out


def redundant(mesh: HexMesh) -> bool:
    """Whether a coarser mesh is solved whole on every rank (at most REDUNDANT_MAX elements)."""
    return mesh.n_elements <= REDUNDANT_MAX


def limits(spec: str, kind: str, name: str = "--sequence") -> tuple[int, int]:
    """(coarser meshes at most, elements of each at least) of --sequence ``spec`` on device
    kind ``kind`` (:func:`plan`); InputError naming the allowed values for another ``spec``,
    the setting spelt ``name``."""
    if spec == "none":
        return 0, 1
    if spec == "auto":
        return SEQUENCE_MAX, SEQUENCE_MIN[kind]
    try:
        levels = int(spec)
    except ValueError:
        raise InputError(
            f"{name} must be auto, none or a count of coarser meshes, 0 to {SEQUENCE_MAX} (got {spec!r})"
        ) from None
    return check_range(name, levels, low=0, high=SEQUENCE_MAX, integer=True), 1
