"""Hex27 mesh of a straight circular pipe with an O-grid cross-section.

    PYTHONPATH=. python meshes/pipe/make_pipe.py [--out meshes/pipe/pipe.msh] [--radius 0.5]
        [--length 5] [--core 4] [--rings 2] [--core-size 0.4] [--nx 12]

Lengths in metres. The pipe r = sqrt(y^2 + z^2) <= radius, 0 <= x <= length (axis x). Its
cross-section (the (y, z) plane) is a square core |y|, |z| <= core-size * radius of core x
core cells and four curved blocks between the square's edges and the circle, each core
cells round and ``rings`` cells out, their radial lines straight (each square node blends
linearly to the circle's node at its angle from the axis; all 8 core Q2 nodes of the
circle lie on it exactly, so the triquadratic geometry carries quadratic arcs of 90 / core
degrees). The section is extruded along x in ``nx`` uniform layers. With an even ``core``
the axis y = z = 0 is a vertex line.

The defaults (committed pipe.msh) give 16 + 4 x 4 x 2 = 48 quadrilaterals in 12 layers:
576 hexahedra, 16,416 unknowns,
cells at most 4.2 times longer than wide (the layers, 0.42 long, over the core's 0.1).

Written as Gmsh 2.2 ASCII (meshio): hexahedron27 cells, quad9 boundary cells with
``gmsh:physical`` tags inflow (1, x = 0), outflow (2, x = length) and wall (3, r = radius),
named in field_data.
"""

from __future__ import annotations

import argparse
import os
import sys

import meshio
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "dfg3d"))
from make_channel import extrude, with_midpoints, write  # noqa: E402  (the channel's extrusion, meshes/dfg3d)

TAGS = {"inflow": 1, "outflow": 2, "wall": 3}
DEFAULTS = dict(radius=0.5, length=5.0, core=4, rings=2, core_size=0.4, nx=12)  # the committed pipe.msh


def section(radius: float, core: int, rings: int, core_size: float):
    """Q2 layout of the cross-section in (p, q) = (y, z): points (N, 2), cells (C, 3, 3)
    node ids indexed [b][a] (counter-clockwise) and the wall edges (cell, axis, side, tag)
    as make_channel.layout_2d returns them."""
    if core < 1 or rings < 1:
        raise ValueError(f"core and rings must be >= 1 (got {core}, {rings})")
    if not 0 < core_size < 1 / np.sqrt(2):
        raise ValueError(f"core-size must be in (0, 0.707): the square inside the circle (got {core_size})")
    m = 2 * core + 1  # Q2 nodes along a core edge
    c = with_midpoints(np.linspace(-core_size * radius, core_size * radius, core + 1))
    P, Q = np.meshgrid(c, c)
    core_pts = np.stack([P.ravel(), Q.ravel()], axis=1)
    ids = np.arange(m * m).reshape(m, m)  # ids[q index][p index]
    j = np.arange(m - 1)  # the square's perimeter counter-clockwise from (-a, -a)
    perimeter = np.concatenate([ids[0, j], ids[j, -1], ids[-1, ::-1][j], ids[::-1, 0][j]])
    square = core_pts[perimeter]  # (8 core, 2)
    theta = -0.75 * np.pi + np.arange(len(perimeter)) * 2 * np.pi / len(perimeter)
    circle = radius * np.stack([np.cos(theta), np.sin(theta)], axis=1)
    g = with_midpoints(np.linspace(0.0, 1.0, rings + 1))[1:]
    outer = (1 - g)[:, None, None] * square + g[:, None, None] * circle  # (2 rings, 8 core, 2)
    ring = np.concatenate(
        [perimeter[None], m * m + np.arange(outer.shape[0] * len(perimeter)).reshape(-1, len(perimeter))]
    )
    cells = [ids[2 * b : 2 * b + 3, 2 * a : 2 * a + 3] for b in range(core) for a in range(core)]
    edges = []
    for er in range(rings):
        for ei in range(4 * core):
            cols = (2 * ei + np.arange(3)) % len(perimeter)
            cells.append(ring[2 * er : 2 * er + 3][:, cols].T)  # [b = round][a = outward]
            if er == rings - 1:
                edges.append((len(cells) - 1, 0, 2, TAGS["wall"]))
    return np.concatenate([core_pts, outer.reshape(-1, 2)]), np.array(cells), edges


def pipe(
    radius: float = DEFAULTS["radius"],
    length: float = DEFAULTS["length"],
    core: int = DEFAULTS["core"],
    rings: int = DEFAULTS["rings"],
    core_size: float = DEFAULTS["core_size"],
    nx: int = DEFAULTS["nx"],
) -> meshio.Mesh:
    """The hex27 pipe: the cross-section of :func:`section` extruded along x in ``nx`` layers."""
    if nx < 1 or not radius > 0 or not length > 0:
        raise ValueError(f"nx, radius and length must be positive (got {nx}, {radius}, {length})")
    mesh = extrude(
        *section(radius, core, rings, core_size),
        np.linspace(0.0, length, nx + 1),
        (TAGS["inflow"], TAGS["outflow"]),
        TAGS,
    )
    mesh.points = mesh.points[:, [2, 0, 1]]  # (y, z, x) -> (x, y, z): a cyclic permutation keeps orientation
    return mesh


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipe.msh"))
    ap.add_argument("--radius", type=float, default=DEFAULTS["radius"], help="pipe radius")
    ap.add_argument("--length", type=float, default=DEFAULTS["length"], help="pipe length (x)")
    ap.add_argument("--core", type=int, default=DEFAULTS["core"], help="cells along each edge of the square core")
    ap.add_argument("--rings", type=int, default=DEFAULTS["rings"], help="radial cell layers between core and wall")
    ap.add_argument(
        "--core-size", type=float, default=DEFAULTS["core_size"], help="the core's half side over the radius"
    )
    ap.add_argument("--nx", type=int, default=DEFAULTS["nx"], help="cell layers along the pipe")
    args = ap.parse_args(argv)
    write(ap, args.out, lambda: pipe(args.radius, args.length, args.core, args.rings, args.core_size, args.nx))


if __name__ == "__main__":
    main()
