"""Result files: VTU (hexahedron27 cells, read by ParaView and PyVista), CSV, JSON."""
from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from contextlib import contextmanager

import numpy as np

from .errors import InputError
from .fields import nodal_fields
from .mesh import TENSOR27_TO_VTK


def ensure_writable_dir(path: str, option: str = "--out") -> str:
    """Create ``path`` if needed and check that files can be written there (InputError if not)."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):  # unnamed where the system allows: ranks probe the same folder
            pass
    except OSError as exc:
        raise InputError(f"{option} {path} is not a writable directory ({exc.strerror or exc})") from None
    return path


def check_writable_file(path: str, option: str = "--out") -> str:
    """Check that ``path`` can be written atomically (its folder exists and takes new
    files, and it is no folder) without creating it; InputError if not."""
    if os.path.isdir(path):
        raise InputError(f"{option} {path} is not writable (it is a directory)")
    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path))):
            pass
    except OSError as exc:
        raise InputError(f"{option} {path} is not writable ({exc.strerror or exc})") from None
    return path


@contextmanager
def atomic_path(path: str):
    """A temporary file name beside ``path`` to write to; renamed onto ``path`` when the
    block succeeds, removed when it fails, so ``path`` holds either its old content or
    the complete new file, never a partial one (a crash or a kill mid-write loses nothing)."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part" + os.path.splitext(name)[1], dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_npy(path: str, array) -> None:
    """``array`` as a .npy file, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(array))


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (figures written to files, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_csv(path: str, header, rows) -> None:
    """Rows (sequences of numbers or strings) under ``header``; floats with 12 significant digits (atomic)."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in rows:
            w.writerow([f"{v:.12g}" if isinstance(v, (float, np.floating)) else v for v in row])


def write_vtu(path: str, mesh, x: np.ndarray, node_sum=None) -> dict:
    """The solution ``x`` (host, layout [u | v | w | p]) on hexahedron27 cells, with point
    data velocity, pressure (Q1 field at all 27 nodes), speed and vorticity. For one
    rank's piece of a distributed mesh, ``node_sum`` completes node sums over the ranks
    (see fem3d.fields.nodal_fields). Returns {field name: number of components}."""
    import meshio

    fields = nodal_fields(mesh, x, node_sum=node_sum)
    cells = mesh.cells[:, TENSOR27_TO_VTK]
    with atomic_path(path) as tmp:
        meshio.write(tmp, meshio.Mesh(mesh.points, [("hexahedron27", cells)], point_data=fields), file_format="vtu", binary=True)
    return {name: (1 if v.ndim == 1 else v.shape[1]) for name, v in fields.items()}


def write_pvtu(path: str, pieces: list, components: dict) -> None:
    """A parallel VTU file ``path`` that joins the VTU ``pieces`` (file names relative to
    it, written by :func:`write_vtu`) into one dataset for ParaView and PyVista;
    ``components`` is {point field: number of components}."""
    arrays = "\n".join(f'      <PDataArray type="Float64" Name="{name}" NumberOfComponents="{k}"/>'
                       for name, k in components.items())
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


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    return obj


def write_json(path: str, data: dict) -> None:
    """``data`` as indented JSON (NumPy scalars converted, NaN/inf written as null), atomically."""
    text = json.dumps(_jsonable(data), indent=1)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
