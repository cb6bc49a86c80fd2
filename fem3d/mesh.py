"""Check a hexahedral mesh file: ``python -m fem3d.mesh FILE`` reads it with meshio, checks its
elements and prints a summary (elements, nodes, unknowns, geometry, colours, boundary tags)."""
from __future__ import annotations

from gpucfd.errors import ArgumentParser, run_cli
from .discretisation.mesh import HexMesh, read_mesh
from .discretisation.mesh_checks import MERGE_TOL


def describe(mesh: HexMesh) -> str:
    """A few lines summarising ``mesh``."""
    lo, hi = mesh.bounds()
    tags = {name: int((mesh.boundary_tags == t).sum()) for name, t in mesh.tag_names.items()}
    untagged = int((mesh.boundary_tags < 0).sum())
    return "\n".join([
        f"elements {mesh.n_elements}  velocity nodes {mesh.n_nodes}  pressure nodes {mesh.n_pressure}  unknowns {mesh.n_dofs}",
        f"geometry {'trilinear' if mesh.geometry.shape[1] == 8 else 'triquadratic'}  colours {mesh.n_colours}  "
        f"bounding box {lo.round(6).tolist()} .. {hi.round(6).tolist()}",
        f"boundary faces {len(mesh.boundary_faces)}: " + ", ".join(f"{k} {v}" for k, v in tags.items()) + f", untagged {untagged}",
        *([f"merged {mesh.merged_nodes} coincident nodes (closer than {MERGE_TOL:g} times the bounding-box diagonal)"]
          if mesh.merged_nodes else []),
    ])


def main(argv=None) -> int:
    """``python -m fem3d.mesh FILE``: read a mesh, check its elements, print a summary."""
    ap = ArgumentParser(prog="python -m fem3d.mesh", description="Read a hexahedral mesh with meshio, check it and print a summary.")
    ap.add_argument("mesh", help="mesh file (hexahedron or hexahedron27 cells)")
    ap.add_argument("--tag-field", default=None, help="integer cell data holding boundary tags (default: gmsh:physical, boundary or tag)")
    args = ap.parse_args(argv)
    print(describe(read_mesh(args.mesh, args.tag_field)))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="fem3d.mesh"))
