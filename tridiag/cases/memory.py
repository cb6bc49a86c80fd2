"""Does a run fit? The memory a 2D case needs, estimated before anything is allocated, against
what the device (CuPy: free device memory plus CuPy's pool) or the host (NumPy: available RAM,
within a cgroup limit) has free.

A case needs about ``arrays`` field-sized arrays (its fields, the line systems' a, b, c, d, x
and the solver's work arrays, measured at the peak of a run) on the device, and
``host_arrays`` float64 field-sized arrays on the host for its results.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import host_free_bytes
from gpucfd.errors import InputError


def check_fits(backend, nodes: int, arrays: float, dtype, host_arrays: float, what: str, largest) -> None:
    """InputError unless ``nodes`` (grid nodes) × the case's arrays fit: ``arrays`` arrays of
    ``dtype`` on the backend's device and ``host_arrays`` float64 arrays on the host (one
    budget when the device is the host). ``what`` names the run, ``largest(max_nodes)`` the
    largest size of it that fits (e.g. "--n 2048")."""
    device = arrays * np.dtype(dtype).itemsize
    host = host_arrays * 8
    budgets = [(device, backend.free_bytes(), "GPU" if backend.is_gpu else "host")]
    if backend.is_gpu:
        budgets.append((host, host_free_bytes(), "host"))
    else:
        budgets[0] = (device + host, budgets[0][1], "host")
    for per_node, free, where in budgets:
        if nodes * per_node > free:
            raise InputError(
                f"{what} needs about {_gib(nodes * per_node)} of {where} memory, {_gib(free)} is free: "
                f"{largest(int(free // per_node))} fits at most"
            )


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"
