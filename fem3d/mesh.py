"""Check a hexahedral mesh file: ``python -m fem3d.mesh FILE`` reads it with meshio, checks its
elements and prints a summary (elements, nodes, unknowns, geometry, colours, boundary tags, quality)."""

from __future__ import annotations

import numpy as np

from gpucfd.errors import ArgumentParser, run_cli
from .discretisation.geometry import element_quality, geometry_element
from .discretisation.mesh import HexMesh, point_text, read_mesh
from .discretisation.mesh_checks import MERGE_TOL
from .solvers.line_vanka import LINE_STRETCH, line_levels
from .solvers.linear import mg_refusal
from .solvers.multigrid import coarsenings, coarsest_size


def describe(mesh: HexMesh) -> str:
    """A few lines summarising ``mesh``."""
    lo, hi = mesh.bounds()
    tags = {name: int((mesh.boundary_tags == t).sum()) for name, t in mesh.tag_names.items()}
    untagged = int((mesh.boundary_tags < 0).sum())
    return "\n".join(
        [
            f"elements {mesh.n_elements}  velocity nodes {mesh.n_nodes}  pressure nodes {mesh.n_pressure}  "
            f"unknowns {mesh.n_dofs}",
            f"geometry {'trilinear' if mesh.geometry.shape[1] == 8 else 'triquadratic'}  colours {mesh.n_colours}  "
            f"bounding box {lo.round(6).tolist()} .. {hi.round(6).tolist()}",
            f"boundary faces {len(mesh.boundary_faces)}: "
            + ", ".join(f"{k} {v}" for k, v in tags.items())
            + f", untagged {untagged}",
            quality_text(mesh),
            hierarchy_text(mesh),
            *(
                [
                    f"merged {mesh.merged_nodes} coincident nodes (closer than {MERGE_TOL:g} times the "
                    "bounding-box diagonal)"
                ]
                if mesh.merged_nodes
                else []
            ),
        ]
    )


def quality_text(mesh: HexMesh) -> str:
    """The line naming the element of largest aspect ratio and the element of smallest scaled
    Jacobian (fem3d.discretisation.geometry.element_quality), each by its id and centre x(0, 0, 0)."""
    aspect, scaled = element_quality(mesh.geometry)
    centre = geometry_element(mesh.geometry.shape[1]).values(np.zeros(3))[0]  # (G,) map weights of the reference centre

    def where(e):
        return f"element {int(mesh.element_ids[e])} at {point_text(centre @ mesh.geometry[e])}"

    a, s = int(np.argmax(aspect)), int(np.argmin(scaled))
    return f"largest aspect ratio {aspect[a]:.3g} ({where(a)}), smallest scaled Jacobian {scaled[s]:.3g} ({where(s)})"


def hierarchy_text(mesh: HexMesh) -> str:
    """The line giving the multigrid levels below the mesh (its sheets paired:
    fem3d.discretisation.coarsen) and its coarsest level, or why the multigrid solver cannot take it."""
    why = mg_refusal(mesh)
    if why:
        return f"multigrid: not possible: {why}"
    below = coarsenings(mesh)
    _, unknowns = coarsest_size(mesh)
    if not below:
        return f"multigrid: the mesh is the coarsest level, {unknowns:,} unknowns, solved directly"
    levels = [mesh] + [c.coarse for c in below]
    sizes = " -> ".join(f"{m.n_elements:,}" for m in levels)
    lines = line_levels(levels[:-1])
    long = f"; {lines} with cells over {LINE_STRETCH:g} times longer than thick, smoothed by lines" if lines else ""
    return (
        f"multigrid: elements per level {sizes} (its sheets paired{long}); the coarsest, {unknowns:,} unknowns, "
        "solved directly"
    )


def main(argv=None) -> int:
    """``python -m fem3d.mesh FILE``: read a mesh, check its elements, print a summary."""
    ap = ArgumentParser(
        prog="python -m fem3d.mesh", description="Read a hexahedral mesh with meshio, check it and print a summary."
    )
    ap.add_argument("mesh", help="mesh file (hexahedron or hexahedron27 cells)")
    ap.add_argument(
        "--tag-field",
        default=None,
        help="integer cell data holding boundary tags (default: gmsh:physical, boundary or tag)",
    )
    args = ap.parse_args(argv)
    print(describe(read_mesh(args.mesh, args.tag_field)))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="fem3d.mesh"))
