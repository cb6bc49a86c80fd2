"""Compiled kernel modules of tridiag (cached per device by gpucfd.backend.cuda_module)."""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np

from gpucfd.backend import cuda_module, cupy_module

# Largest dynamic shared memory one block may ask for on sm_90 (227 KiB).
MAX_SHARED = 232448
NULL = np.uint64(0)  # a null pointer kernel argument (8 bytes by value)


def kernel(filename: str, name: str, dtype, shared: int = 0, options: tuple = ()):
    """Kernel ``name``_f32/_f64 of ``filename`` (compiled with the extra nvcc ``options``), allowed
    ``shared`` bytes of dynamic shared memory."""
    fn = _function(
        filename,
        f"{name}_{'f64' if np.dtype(dtype) == np.float64 else 'f32'}",
        cupy_module().cuda.Device().id,
        tuple(options),
    )
    if shared > 48 * 1024 and _shared_limit.get(fn, 0) < shared:
        fn.max_dynamic_shared_size_bytes = shared
        _shared_limit[fn] = shared
    return fn


_shared_limit: dict = {}


@functools.lru_cache(maxsize=None)
def _function(filename: str, fullname: str, device_id: int, options: tuple):
    include = importlib.resources.files("tridiag.kernels")
    return cuda_module("tridiag.kernels", filename, ("-std=c++17", f"-I{include}", *options)).get_function(fullname)


def blocks(total: int, threads: int) -> int:
    return (total + threads - 1) // threads


def round_warp(n: int) -> int:
    return max(32, (n + 31) // 32 * 32)
