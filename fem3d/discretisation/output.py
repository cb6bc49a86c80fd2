"""fem3d result files: VTU (hexahedron27 cells, read by ParaView and PyVista) and the
centre-line profiles as CSV (gpucfd.output writes them atomically)."""

from __future__ import annotations

import csv

import numpy as np
from gpucfd.output import atomic_path

from .fields import nodal_fields
from .mesh import TENSOR27_TO_VTK


def write_vtu(path: str, mesh, x: np.ndarray, node_sum=None) -> dict:
    """The solution ``x`` (host, layout [u | v | w | p]) on hexahedron27 cells, with point
    data velocity, pressure (Q1 field at all 27 nodes), speed and vorticity. For one
    rank's piece of a distributed mesh, ``node_sum`` completes node sums over the ranks
    (see fem3d.discretisation.fields.nodal_fields). Returns {field name: number of components}."""
    import meshio

    fields = nodal_fields(mesh, x, node_sum=node_sum)
    cells = mesh.cells[:, TENSOR27_TO_VTK]
    with atomic_path(path) as tmp:
        meshio.write(
            tmp,
            meshio.Mesh(mesh.points, [("hexahedron27", cells)], point_data=fields),
            file_format="vtu",
            binary=True,
            compression=None,  # zlib takes several times as long as the writing, for a file of about half the size
        )
    return {name: (1 if v.ndim == 1 else v.shape[1]) for name, v in fields.items()}


def write_pvtu(path: str, pieces: list, components: dict) -> None:
    """A parallel VTU file ``path`` that joins the VTU ``pieces`` (file names relative to
    it, written by :func:`write_vtu`) into one dataset for ParaView and PyVista;
    ``components`` is {point field: number of components}."""
    arrays = "\n".join(
        f'      <PDataArray type="Float64" Name="{name}" NumberOfComponents="{k}"/>' for name, k in components.items()
    )
    sources = "\n".join(f'    <Piece Source="{piece}"/>' for piece in pieces)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(f"""<?xml version="1.0"?>
<VTKFile type="PUnstructuredGrid" version="0.1" byte_order="LittleEndian">
  <PUnstructuredGrid GhostLevel="0">
    <PPointData>
{arrays}
    </PPointData>
    <PPoints>
      <PDataArray type="Float64" Name="Points" NumberOfComponents="3"/>
    </PPoints>
{sources}
  </PUnstructuredGrid>
</VTKFile>
""")


def write_profiles_csv(path: str, profiles: dict) -> None:
    """profiles: name -> dict(coord_name, coords (m,), points (m, 3), velocity (m, 3), pressure (m,)).

    One row per point: profile, s (coordinate along the line), x, y, z, u, v, w, p (atomic).
    """
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["profile", "s", "x", "y", "z", "u", "v", "w", "p"])
        for name, prof in profiles.items():
            for s, pt, vel, pr in zip(prof["coords"], prof["points"], prof["velocity"], prof["pressure"]):
                w.writerow([name, f"{s:.6g}", *(f"{v:.6g}" for v in pt), *(f"{v:.10g}" for v in vel), f"{pr:.10g}"])


def write_pvd(path: str, entries: list) -> None:
    """A PVD collection ``path`` (atomically): the time series of the datasets ``entries``
    [(t, file name relative to it)], which ParaView and PyVista open as one animated dataset."""
    sets = "\n".join(f'    <DataSet timestep="{t!r}" part="0" file="{name}"/>' for t, name in entries)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(f"""<?xml version="1.0"?>
<VTKFile type="Collection" version="0.1" byte_order="LittleEndian">
  <Collection>
{sets}
  </Collection>
</VTKFile>
""")
