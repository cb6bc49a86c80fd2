"""Hex27 mesh of the DFG 2D cylinder benchmark (Schaefer & Turek 1996, cases 2D-1/2D-2) as a
slab one element thick, for a 3D solver with slip on its two z planes.

    PYTHONPATH=. python meshes/dfg2d/make_slab.py [--out meshes/dfg2d/slab.msh] [--around 24]
        [--rings 4] [--upstream 1] [--downstream 20] [--thickness 0.05]

Lengths in metres. Channel [0, 2.2] x [0, 0.41]; cylinder of radius 0.05, axis along z
through (x, y) = (0.2, 0.2); 0 <= z <= thickness. The (x, y) layout is make_channel.py's
(meshes/dfg3d: an O-grid ring of ``around`` cells round the cylinder filling the box
[0.05, 0.35] x [0, 0.41], ``rings`` cells out at geometric radii, an upstream block and a
downstream block whose x-cells grow geometrically), extruded in one layer. The front and
rear stagnation points (0.15, 0.2) and (0.25, 0.2), where the benchmark's pressure
difference is taken, are vertices; every Q2 node of the cylinder lies on the exact circle.

The defaults (committed slab.msh) give 24 x 4 + 6 x (1 + 20) = 222 hexahedra, 9,336
unknowns, cells at most 3.8 times longer than wide (the slab's 0.05 over the first ring's
0.013 round the cylinder).

Written as Gmsh 2.2 ASCII (meshio): hexahedron27 cells, quad9 boundary cells with
``gmsh:physical`` tags inflow (1, x = 0), outflow (2, x = 2.2), walls (3, y = 0 and 0.41),
cylinder (4) and sides (5, z = 0 and thickness), named in field_data.
"""

from __future__ import annotations

import argparse
import os
import sys

import meshio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "dfg3d"))
from make_channel import Plane, channel, layout_options, write  # noqa: E402  (the DFG 3D channel's layout, meshes/dfg3d)

PLANE = Plane(length=2.2, centre_x=0.2, half_width=0.15)
DEFAULTS = dict(around=24, rings=4, upstream=1, downstream=20, thickness=0.05)  # the committed slab.msh


def slab(
    around: int = DEFAULTS["around"],
    rings: int = DEFAULTS["rings"],
    upstream: int = DEFAULTS["upstream"],
    downstream: int = DEFAULTS["downstream"],
    thickness: float = DEFAULTS["thickness"],
) -> meshio.Mesh:
    """The one-layer hex27 slab of the DFG 2D channel."""
    if not thickness > 0:
        raise ValueError(f"thickness must be positive (got {thickness})")
    return channel(around, rings, upstream, downstream, nz=1, plane=PLANE, depth=thickness, sides="sides")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "slab.msh"))
    layout_options(ap, DEFAULTS)
    ap.add_argument("--thickness", type=float, default=DEFAULTS["thickness"], help="the slab's extent in z")
    args = ap.parse_args(argv)
    write(ap, args.out, lambda: slab(args.around, args.rings, args.upstream, args.downstream, args.thickness))


if __name__ == "__main__":
    main()
