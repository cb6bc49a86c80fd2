"""Write the sample meshes of this folder (Gmsh 2.2 format, read by meshio and ParaView).

    python meshes/make_sample_meshes.py [--out meshes]

distorted_cube_hex8.msh   unit cube, 6^3 trilinear hexahedra whose interior vertices are
                          moved by a smooth displacement (faces stay planar);
                          boundary quads tagged "lid" (y = 1) and "walls" (the rest)
annulus_hex27.msh         thick cylindrical shell 0.5 <= r <= 1, 0 <= z <= 0.5, 16 x 2 x 2
                          triquadratic hexahedra on the exact circle; boundary quad9
                          tagged "inner", "outer", "ends"
"""

from __future__ import annotations

import argparse
import os

import meshio
import numpy as np

from fem3d.discretisation.mesh import TENSOR27_TO_VTK, box_mesh


def distorted_cube(n: int = 6, amplitude: float = 0.04) -> meshio.Mesh:
    """Hex8 unit cube with interior vertices displaced by amplitude * sin(2 pi .) products."""
    box = box_mesh(n)
    verts = box.points[box.pressure_nodes].copy()
    x, y, z = verts.T
    bump = np.sin(np.pi * x) * np.sin(np.pi * y) * np.sin(np.pi * z)
    verts[:, 0] += amplitude * bump * np.sin(2 * np.pi * y)
    verts[:, 1] += amplitude * bump * np.sin(2 * np.pi * z)
    verts[:, 2] += amplitude * bump * np.sin(2 * np.pi * x)
    hexes = box.pressure_cells[:, [0, 1, 3, 2, 4, 5, 7, 6]]  # tensor -> VTK order
    quads, tags = [], []
    q1_faces = {0: [0, 2, 6, 4], 1: [1, 3, 7, 5], 2: [0, 1, 5, 4], 3: [2, 3, 7, 6], 4: [0, 1, 3, 2], 5: [4, 5, 7, 6]}
    for (e, f), tag in zip(box.boundary_faces, box.boundary_tags):
        quads.append(box.pressure_cells[e, q1_faces[f]])
        tags.append(1 if tag == box.tag_names["y1"] else 2)
    return meshio.Mesh(
        verts,
        [("quad", np.array(quads)), ("hexahedron", hexes)],
        cell_data={
            "gmsh:physical": [np.array(tags), np.zeros(len(hexes), dtype=int)],
            "gmsh:geometrical": [np.array(tags), np.zeros(len(hexes), dtype=int)],
        },
        field_data={"lid": np.array([1, 2]), "walls": np.array([2, 2])},
    )


def annulus(
    n_theta: int = 16, n_r: int = 2, n_z: int = 2, r0: float = 0.5, r1: float = 1.0, height: float = 0.5
) -> meshio.Mesh:
    """Hex27 shell with nodes on the exact cylinders (triquadratic geometry)."""
    nt, nr, nz = 2 * n_theta, 2 * n_r + 1, 2 * n_z + 1  # Q2 node counts (theta periodic)
    t = np.arange(nt) * (2 * np.pi / nt)
    r = np.linspace(r0, r1, nr)
    zz = np.linspace(0.0, height, nz)
    # node indices along z, r and theta
    iz, ir, it = np.meshgrid(np.arange(nz), np.arange(nr), np.arange(nt), indexing="ij")
    pts = np.stack([r[ir] * np.cos(t[it]), r[ir] * np.sin(t[it]), zz[iz]], axis=-1).reshape(-1, 3)

    def node(i, j, k):
        return (i % nt) + nt * (j + nr * k)

    cells = []
    for ek in range(n_z):
        for ej in range(n_r):
            for ei in range(n_theta):
                # local xi along r, eta along theta, zeta along z: a right-handed (positive Jacobian) map
                tensor = [
                    node(2 * ei + b, 2 * ej + a, 2 * ek + c) for c in range(3) for b in range(3) for a in range(3)
                ]
                cells.append(np.array(tensor)[TENSOR27_TO_VTK])
    cells = np.array(cells)
    quads, tags = [], []
    for ek in range(n_z):  # radial walls: inner (j = 0) and outer (j = last)
        for ei in range(n_theta):
            for j, tag in ((0, 1), (nr - 1, 2)):
                quads.append(_quad9(lambda a, c: node(2 * ei + a, j, 2 * ek + c)))
                tags.append(tag)
    for ej in range(n_r):  # ends z = 0 and z = height
        for ei in range(n_theta):
            for k in (0, nz - 1):
                quads.append(_quad9(lambda a, b: node(2 * ei + a, 2 * ej + b, k)))
                tags.append(3)
    return meshio.Mesh(
        pts,
        [("quad9", np.array(quads)), ("hexahedron27", cells)],
        cell_data={
            "gmsh:physical": [np.array(tags), np.zeros(len(cells), dtype=int)],
            "gmsh:geometrical": [np.array(tags), np.zeros(len(cells), dtype=int)],
        },
        field_data={"inner": np.array([1, 2]), "outer": np.array([2, 2]), "ends": np.array([3, 2])},
    )


def _quad9(node):
    """quad9 node list (VTK order: 4 corners, 4 edge midpoints, centre) of a face node(a, b), a, b in 0..2."""
    order = [(0, 0), (2, 0), (2, 2), (0, 2), (1, 0), (2, 1), (1, 2), (0, 1), (1, 1)]
    return [node(a, b) for a, b in order]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    for name, mesh in (("distorted_cube_hex8.msh", distorted_cube()), ("annulus_hex27.msh", annulus())):
        path = os.path.join(args.out, name)
        meshio.write(path, mesh, file_format="gmsh22", binary=False)
        print(f"wrote {path}: {len(mesh.points)} points")


if __name__ == "__main__":
    main()
