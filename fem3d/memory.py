"""The memory a fem3d run needs, estimated before anything is allocated.

Per element of this rank's part: the stored element matrices and everything else the
solver keeps (vectors, preconditioner, assembly batches), measured at the peak of runs
(scripts/bench_fem.py: peak of CuPy's pool on an H100; the NumPy path: peak resident
size of `python -m fem3d.cavity` at 20^3 and 26^3), plus a fixed part (the NumPy path's
batched diag(A^T A), the CUDA context and modules). The host also holds the whole mesh.
"""
from __future__ import annotations

from gpucfd.backend import host_free_bytes
from gpucfd.errors import InputError

# (device kind, matrix storage) -> (bytes per element, fixed bytes) on the device
DEVICE_BYTES = {
    ("gpu", "float64"): (101.5e3, 0.5e9),
    ("gpu", "float32"): (65.4e3, 0.5e9),
    ("cpu", "float64"): (72e3, 2.6e9),
    ("cpu", "float32"): (100e3, 2.6e9),  # each NumPy product makes a float64 copy of the matrices
}
HOST_MESH_BYTES = 4e3  # per element of the whole mesh: connectivity, coordinates, geometry, boundary faces


def check_fits(backend, matrix_dtype: str, mesh_elements: int, ranks: int, largest) -> None:
    """InputError unless this rank's share of a mesh of ``mesh_elements`` elements split
    over ``ranks`` fits its device, and the whole mesh its host. ``largest(n)`` words the
    hint for a mesh of n elements, e.g. "--n 92 fits at most"."""
    elements = -(-mesh_elements // ranks)
    per_element, fixed = DEVICE_BYTES[(backend.kind, matrix_dtype)]
    if backend.is_gpu:
        checks = [(per_element, fixed, elements, ranks, backend.free_bytes(), "GPU"),
                  (HOST_MESH_BYTES, 0.0, mesh_elements, 1, host_free_bytes(), "host")]
    else:
        per = per_element + HOST_MESH_BYTES * ranks
        checks = [(per, fixed, elements, ranks, backend.free_bytes(), "host")]
    for per, base, count, share, free, where in checks:
        need = base + per * count
        if need > free:
            fits = max(0, int((free - base) // per)) * share
            raise InputError(f"{mesh_elements:,} elements need about {need / 2**30:.3g} GiB of {where} memory"
                             f"{' per rank' if ranks > 1 and share > 1 else ''} ({matrix_dtype} element matrices), "
                             f"{max(free, 0) / 2**30:.3g} GiB is free: {largest(fits)}")
