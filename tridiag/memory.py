"""Does a run fit? The memory a 2D case needs, estimated before anything is allocated, against
what the device (CuPy: free device memory plus CuPy's pool) or the host (NumPy: available RAM,
within a cgroup limit) has free.

A case needs about ``arrays`` field-sized arrays (its fields, the line systems' a, b, c, d, x
and the solver's work arrays, measured at the peak of a run) on the device, and
``host_arrays`` float64 field-sized arrays on the host for its results.
"""
from __future__ import annotations

import os

import numpy as np

from fem3d.errors import InputError


def host_available() -> int:
    """Bytes of RAM available to this process: /proc/meminfo's MemAvailable (else the free pages),
    at most the cgroup's memory.max minus memory.current where one is set."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/proc/meminfo") as fh:
            available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as fh, open("/sys/fs/cgroup/memory.current") as cur:
            limit = fh.read().strip()
            if limit.isdigit():
                available = min(available, int(limit) - int(cur.read()))
    except (OSError, ValueError):
        pass
    return available


def device_available(backend) -> int:
    """Bytes free on the backend's device: the GPU's free memory and CuPy's pooled free blocks,
    or the host's available RAM for NumPy."""
    if not backend.is_gpu:
        return host_available()
    free, _ = backend.xp.cuda.runtime.memGetInfo()
    return free + backend.xp.get_default_memory_pool().free_bytes()


def check_fits(backend, nodes: int, arrays: float, dtype, host_arrays: float, what: str, largest) -> None:
    """InputError unless ``nodes`` (grid nodes) × the case's arrays fit: ``arrays`` arrays of
    ``dtype`` on the backend's device and ``host_arrays`` float64 arrays on the host (one
    budget when the device is the host). ``what`` names the run, ``largest(max_nodes)`` the
    largest size of it that fits (e.g. "--n 2048")."""
    device = arrays * np.dtype(dtype).itemsize
    host = host_arrays * 8
    budgets = [(device, device_available(backend), "GPU" if backend.is_gpu else "host")]
    if backend.is_gpu:
        budgets.append((host, host_available(), "host"))
    else:
        budgets[0] = (device + host, budgets[0][1], "host")
    for per_node, free, where in budgets:
        if nodes * per_node > free:
            raise InputError(f"{what} needs about {_gib(nodes * per_node)} of {where} memory, {_gib(free)} is free: "
                             f"{largest(int(free // per_node))} fits at most")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"
