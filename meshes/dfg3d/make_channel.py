"""Coarse hex27 mesh of the DFG 3D cylinder benchmark (Schaefer & Turek 1996, case 3D-1Z).

    PYTHONPATH=. python meshes/dfg3d/make_channel.py [--out meshes/dfg3d/channel_coarse.msh]
        [--around 16] [--rings 3] [--upstream 2] [--downstream 12] [--nz 6] [--z-grading 0]
        [--first-layer FRACTION] [--binary]

Lengths in metres. Channel [0, 2.5] x [0, 0.41] x [0, 0.41]; cylinder of radius 0.05,
axis along z through (x, y) = (0.5, 0.2). A quadrilateral layout of the (x, y) plane,
extruded in z in ``nz`` layers (uniform, or tanh-graded toward z = 0 and 0.41 with
``--z-grading``, see fem3d.discretisation.mesh.graded_coordinates):

    y = 0.41 +--------+-----------------+----------------------------------+
             | up-    |   O-grid ring   |  downstream: x-cells grow        |
             | stream |  (around x      |  geometrically from the ring's   |
             | x k    |  rings), circle |  outer radial width,             |
             | cells  |  -> box edges   |  downstream x k cells            |
    y = 0    +--------+-----------------+----------------------------------+
            x=0      0.3               0.7                                2.5

The ring fills the box [0.3, 0.7] x [0, 0.41] around the cylinder: ``around`` cells
(a multiple of 8) go round the circle, a quarter of them along each box edge, so the
channel has k = around / 4 uniform cells in y; its diagonals run from the circle at
45, 135, 225, 315 degrees to the box corners, and the stagnation points (0.45, 0.2) and
(0.55, 0.2) (where the benchmark's pressure difference is taken) are vertices. Radial
lines are straight; along each, the ``rings`` vertex levels sit at the fractions of the
way from circle to box that a geometric radius sequence 0.05 -> 0.2 gives at 0 degrees,
so ring cells grow outward with the radius. Every Q2 node of the cylinder surface lies
on the exact circle, so the triquadratic geometry carries piecewise-quadratic arcs of
2 phi = 360/around degrees (refinement keeps them): they enclose less than the circle by
a fraction below phi^4 / 30 (4.9e-5 for around = 16) and are shorter by one below
phi^4 / 60. Elsewhere, nodes blend linearly between circle and box edge, and block cells
are rectangles with mid nodes at the midpoints. With even nz the mid-plane z = 0.205 is
a vertex plane, so both pressure points (0.45, 0.2, 0.205), (0.55, 0.2, 0.205) are
vertices. The defaults (committed channel_coarse.msh) give 16 x 3 + 4 x (2 + 12) = 104
quadrilaterals in 6 layers: 624 hexahedra, whose cells are at most 3.8 times longer than
wide. The multigrid solver needs cells that are not much longer than wide: with 4 layers
(288 hexahedra, cells up to 4.0 times longer, 3.2 near the cylinder) its FGMRES iterations
per Newton step grew from 4.2 to 6.8 to 10.6 over three refinements (one H100); with
2 layers (up to 6.4) from 8.8 to 44 over one (CPU, nu = 0.01).

With ``--first-layer f`` the ring is a boundary layer instead: its first cells are f times
the spacing round the circle (2 pi r / around) thick on the longest radial line (the
diagonals; thinner on the others), and the rings' thicknesses grow outward by the constant
ratio that fills the box. The committed channel_boundary_layer.msh (case
dfg_3d_1z_boundary_layer.toml) is ``--around 24 --rings 14 --upstream 2 --downstream 12
--nz 8 --first-layer 0.045 --binary``: 24 x 14 + 6 x (2 + 12) = 420 quadrilaterals in 8
layers, 3,360 hexahedra; the first ring at least 22 times thinner than wide (chords round
the circle over radial edges), growth 1.45; cells up to 139 times longer than wide (a z
layer over the first ring's thickness).

Written as Gmsh 2.2 ASCII (``--binary``: binary, a third of the size; meshio): hexahedron27
cells, quad9 boundary cells with ``gmsh:physical`` tags inflow (1, x = 0), outflow (2, x =
2.5), walls (3, y = 0, 0.41 and z = 0, 0.41) and cylinder (4), named in field_data.
:func:`channel` also lays out other channels (:class:`Plane`) and slabs whose z planes
carry the tag sides (5): meshes/dfg2d/make_slab.py; :func:`extrude` extrudes any Q2
layout (meshes/pipe/make_pipe.py).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import meshio
import numpy as np

from fem3d.discretisation.mesh import TENSOR27_TO_VTK, graded_coordinates

LENGTH, HEIGHT = 2.5, 0.41  # channel length (x) and height = depth (y, z)
CENTRE, RADIUS = (0.5, 0.2), 0.05  # cylinder axis (x, y) and radius
HALF_WIDTH = 0.2  # the ring's box is CENTRE[0] -+ HALF_WIDTH in x
TAGS = {"inflow": 1, "outflow": 2, "walls": 3, "cylinder": 4, "sides": 5}  # sides: z planes of a slab (meshes/dfg2d)
DEFAULTS = dict(around=16, rings=3, upstream=2, downstream=12, nz=6)  # the committed channel_coarse.msh
QUAD9 = [(0, 0), (2, 0), (2, 2), (0, 2), (1, 0), (2, 1), (1, 2), (0, 1), (1, 1)]  # VTK order of a face's (p, q)


@dataclass(frozen=True)
class Plane:
    """The (x, y) plane of a channel of height HEIGHT round a cylinder of radius RADIUS at
    (centre_x, CENTRE[1]): its length (x) and the half width (x) of the ring's box."""

    length: float = LENGTH
    centre_x: float = CENTRE[0]
    half_width: float = HALF_WIDTH


def _geometric_cells(length: float, first: float, n: int) -> np.ndarray:
    """n+1 vertex coordinates on [0, length] whose cell sizes grow (or shrink) by a constant
    ratio from ``first``; the ratio is found by bisection."""
    lo, hi = 1e-3, 10.0
    for _ in range(200):
        q = 0.5 * (lo + hi)
        total = first * n if q == 1.0 else first * (q**n - 1.0) / (q - 1.0)
        lo, hi = (q, hi) if total < length else (lo, q)
    x = np.concatenate([[0.0], np.cumsum(first * q ** np.arange(n))])
    x[-1] = length
    return x


def with_midpoints(vertices: np.ndarray) -> np.ndarray:
    """Q2 node coordinates (2n+1) of cells with the given n+1 vertices: mid nodes at midpoints."""
    out = np.empty(2 * len(vertices) - 1)
    out[0::2] = vertices
    out[1::2] = 0.5 * (vertices[:-1] + vertices[1:])
    return out


def layout_2d(
    around: int, rings: int, upstream: int, downstream: int, first_layer: float | None = None, plane: Plane = Plane()
):
    """Q2 quadrilateral layout of the (x, y) plane.

    ``first_layer`` None: ring vertex levels at the radii of a geometric sequence (module
    docstring); a number f: the first ring f times the cells' spacing round the circle
    (2 pi RADIUS / around) thick on the longest radial line (thinner on the others), the
    rings' thicknesses growing outward by the constant ratio that fills the box.
    Returns points (N, 2), cells (C, 3, 3) node ids indexed [b][a] (a along the
    first local axis; counter-clockwise) and boundary edges: a list of
    (cell, axis, side, tag) with axis 0|1 and side 0|2 the local index held fixed.
    """
    if around < 8 or around % 8:
        raise ValueError(f"around must be a positive multiple of 8 (got {around})")
    if min(rings, upstream, downstream) < 1:
        raise ValueError("rings, upstream and downstream must be >= 1")
    if first_layer is not None and not 0 < first_layer <= 1:
        raise ValueError(f"first-layer must be in (0, 1] (got {first_layer})")
    n2, k = 2 * around, around // 4  # Q2 nodes round the ring; cells in y
    centre, half = (plane.centre_x, CENTRE[1]), plane.half_width
    x0, x1 = centre[0] - half, centre[0] + half
    i = np.arange(n2)
    theta = -0.75 * np.pi + i * np.pi / around  # node i = 0 at the lower-left corner, counter-clockwise
    circle = np.stack([centre[0] + RADIUS * np.cos(theta), centre[1] + RADIUS * np.sin(theta)], axis=1)
    side, t = i // (n2 // 4), (i % (n2 // 4)) / (n2 // 4)
    corners = np.array([(x0, 0.0), (x1, 0.0), (x1, HEIGHT), (x0, HEIGHT)])  # box edge s runs from corner s to s + 1
    box = (1 - t)[:, None] * corners[side] + t[:, None] * corners[(side + 1) % 4]
    if first_layer is None:
        radii = RADIUS * (half / RADIUS) ** (np.arange(rings + 1) / rings)
        levels, first = (
            (radii - RADIUS) / (half - RADIUS),
            half - radii[-2],
        )  # first: the outer ring's width at 0 degrees
    else:
        reach = np.linalg.norm(box - circle, axis=1).max()
        levels = _geometric_cells(1.0, first_layer * 2 * np.pi * RADIUS / around / reach, rings)
        first = (1 - levels[-2]) * (half - RADIUS)
    g = with_midpoints(levels)
    ring_pts = (1 - g)[:, None, None] * circle + g[:, None, None] * box  # (2 rings + 1, n2, 2)
    ring = np.arange(ring_pts.shape[0] * n2).reshape(-1, n2)
    points = [ring_pts.reshape(-1, 2)]
    count = ring.size

    ys = with_midpoints(np.linspace(0.0, HEIGHT, k + 1))
    jy = np.arange(2 * k + 1)

    def block(xs, shared_col, shared_ids):
        nonlocal count
        ids = np.empty((2 * k + 1, len(xs)), dtype=np.int64)
        new_cols = np.delete(np.arange(len(xs)), shared_col)
        ids[:, new_cols] = count + np.arange(len(jy) * len(new_cols)).reshape(len(jy), -1)
        ids[:, shared_col] = shared_ids
        X, Y = np.meshgrid(xs[new_cols], ys)
        points.append(np.stack([X.ravel(), Y.ravel()], axis=1))
        count += X.size
        return ids

    up = block(with_midpoints(np.linspace(0.0, x0, upstream + 1)), -1, ring[-1, (n2 - jy) % n2])
    down = block(x1 + with_midpoints(_geometric_cells(plane.length - x1, first, downstream)), 0, ring[-1, n2 // 4 + jy])

    cells, edges = [], []
    for er in range(rings):
        for ei in range(around):
            cols = (2 * ei + np.arange(3)) % n2
            cells.append(ring[2 * er : 2 * er + 3][:, cols].T)  # [b = around][a = radial]
            if er == 0:
                edges.append((len(cells) - 1, 0, 0, TAGS["cylinder"]))
            if er == rings - 1 and (2 * ei) // (n2 // 4) in (0, 2):
                edges.append((len(cells) - 1, 0, 2, TAGS["walls"]))
    for ids, inlet in ((up, True), (down, False)):
        nx = (ids.shape[1] - 1) // 2
        for ey in range(k):
            for ex in range(nx):
                cells.append(ids[2 * ey : 2 * ey + 3, 2 * ex : 2 * ex + 3])
                c = len(cells) - 1
                if inlet and ex == 0:
                    edges.append((c, 0, 0, TAGS["inflow"]))
                if not inlet and ex == nx - 1:
                    edges.append((c, 0, 2, TAGS["outflow"]))
                if ey in (0, k - 1):
                    edges.append((c, 1, 0 if ey == 0 else 2, TAGS["walls"]))
    return np.concatenate(points), np.array(cells), edges


def channel(
    around: int = DEFAULTS["around"],
    rings: int = DEFAULTS["rings"],
    upstream: int = DEFAULTS["upstream"],
    downstream: int = DEFAULTS["downstream"],
    nz: int = DEFAULTS["nz"],
    z_grading: float = 0.0,
    first_layer: float | None = None,
    plane: Plane = Plane(),
    depth: float = HEIGHT,
    sides: str = "walls",
) -> meshio.Mesh:
    """The hex27 channel mesh: the (x, y) layout of :func:`layout_2d` extruded in ``nz`` layers
    over 0 <= z <= ``depth``, whose planes z = 0 and depth are tagged ``sides`` (a name of TAGS)."""
    if nz < 1:
        raise ValueError(f"nz must be >= 1 (got {nz})")
    pts2, cells2, edges = layout_2d(around, rings, upstream, downstream, first_layer, plane)
    return extrude(pts2, cells2, edges, graded_coordinates(nz, depth, z_grading), (TAGS[sides], TAGS[sides]), TAGS)


def extrude(
    pts2: np.ndarray, cells2: np.ndarray, edges: list, levels: np.ndarray, ends: tuple, names: dict
) -> meshio.Mesh:
    """A hex27 mesh of a Q2 quadrilateral layout (points (N, 2), cells (C, 3, 3) and boundary
    edges as :func:`layout_2d` returns them) extruded along z through the vertex ``levels``
    (L + 1,): the edges become quad9 faces of their tag in every layer, the planes z =
    levels[0] and levels[-1] are tagged ends[0] and ends[1]; ``names`` maps tag names to
    tags (those used become field_data)."""
    nz, zs = len(levels) - 1, with_midpoints(levels)
    n2 = len(pts2)
    points = np.concatenate([np.column_stack([pts2, np.full(n2, z)]) for z in zs])
    # hexes[e, c, b, a]: local (a, b) from the 2D cell, c along z, so a row-major ravel is tensor order
    hexes = np.array([[cell + n2 * (2 * ez + c) for c in range(3)] for ez in range(nz) for cell in cells2])
    quads, tags = [], []

    def face(h, axis, s):
        """(3, 3) node ids [q][p] of the face of hexes[h] with local index ``axis`` (0 = a, 1 = b, 2 = c) = s."""
        return (hexes[h][:, :, s], hexes[h][:, s, :], hexes[h][s])[axis]

    for ez in range(nz):
        base = ez * len(cells2)
        for c, axis, s, tag in edges:
            quads.append(face(base + c, axis, s))
            tags.append(tag)
        for c in range(len(cells2)):
            for s in [0] * (ez == 0) + [2] * (ez == nz - 1):
                quads.append(face(base + c, 2, s))
                tags.append(ends[s // 2])
    quad9 = np.array([[f[q, p] for p, q in QUAD9] for f in quads])
    hex27 = hexes.reshape(len(hexes), 27)[:, TENSOR27_TO_VTK]
    zeros = np.zeros(len(hex27), dtype=int)
    return meshio.Mesh(
        points,
        [("quad9", quad9), ("hexahedron27", hex27)],
        cell_data={"gmsh:physical": [np.array(tags), zeros], "gmsh:geometrical": [np.array(tags), zeros]},
        field_data={name: np.array([tag, 2]) for name, tag in names.items() if tag in tags},
    )


def layout_options(ap, defaults: dict) -> None:
    """Add the plane layout's options (cells round the cylinder, rings, upstream, downstream) to ``ap``."""
    ap.add_argument("--around", type=int, default=defaults["around"], help="cells round the cylinder (multiple of 8)")
    ap.add_argument("--rings", type=int, default=defaults["rings"], help="radial cell layers of the O-grid ring")
    ap.add_argument("--upstream", type=int, default=defaults["upstream"], help="cells in x upstream of the ring")
    ap.add_argument("--downstream", type=int, default=defaults["downstream"], help="cells in x downstream of the ring")


def write(ap, out: str, build, binary: bool = False) -> None:
    """Write the meshio mesh that ``build()`` makes to ``out`` (Gmsh 2.2); its ValueError is an error of ``ap``."""
    try:
        mesh = build()
    except ValueError as exc:
        ap.error(str(exc))
    meshio.write(out, mesh, file_format="gmsh22", binary=binary)
    print(f"wrote {out}: {len(mesh.cells[1].data)} hexahedra, {len(mesh.points)} points")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "channel_coarse.msh"))
    layout_options(ap, DEFAULTS)
    ap.add_argument("--nz", type=int, default=DEFAULTS["nz"], help="cell layers in z")
    ap.add_argument("--z-grading", type=float, default=0.0, help="tanh grading toward z = 0 and 0.41 (0: uniform)")
    ap.add_argument(
        "--first-layer",
        type=float,
        default=None,
        metavar="FRACTION",
        help="boundary layer: the first ring this fraction of the spacing round the cylinder thick, "
        "rings growing geometrically (default: rings at geometric radii)",
    )
    ap.add_argument("--binary", action="store_true", help="write binary Gmsh 2.2 (a third of the ASCII size)")
    args = ap.parse_args(argv)
    write(
        ap,
        args.out,
        lambda: channel(
            args.around, args.rings, args.upstream, args.downstream, args.nz, args.z_grading, args.first_layer
        ),
        args.binary,
    )


if __name__ == "__main__":
    main()
