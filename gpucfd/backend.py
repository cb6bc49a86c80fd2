"""Array backend: NumPy on the CPU or CuPy on a CUDA GPU, chosen once per process.

Code above the kernels is written once against ``backend.xp``. GPU kernels are CUDA
sources in a package's ``kernels/`` folder, compiled once per device by
:func:`cuda_module`. Timing helpers synchronise the device so that GPU work is
counted where it is issued.
"""

from __future__ import annotations

import functools
import gc
import importlib.resources
import os
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import InputError

DEVICES = ("auto", "cpu", "gpu")
DTYPES = {"float64": np.float64, "float32": np.float32}


@functools.cache
def cupy_module():
    """The CuPy module if it imports and sees at least one CUDA device, else None."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # ImportError, missing driver, CUDARuntimeError
        return None


def to_numpy(a) -> np.ndarray:
    """``a`` (a NumPy or CuPy array) as a NumPy array on the host (a copy for CuPy, ``a`` itself for NumPy)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def einsum(xp, subscripts: str, *operands):
    """``xp.einsum`` with an optimised contraction order (through matrix products where
    possible): NumPy's default order is up to 20x slower on the element tables."""
    return xp.einsum(subscripts, *operands, optimize=True)


@dataclass(frozen=True)
class Backend:
    """Where arrays live: ``kind`` is "cpu" (NumPy) or "gpu" (CuPy on ``device_id``)."""

    kind: str
    xp: Any
    device_id: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def asarray(self, a, dtype=None):
        """``a`` as an array of this backend (copied to the device if needed)."""
        return self.xp.asarray(a, dtype=dtype)

    def to_numpy(self, a) -> np.ndarray:
        """``a`` as a NumPy array on the host."""
        return to_numpy(a)

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.Device(self.device_id).synchronize()

    def free_bytes(self) -> int:
        """Bytes this process may still allocate on the backend's device: the GPU's free
        memory plus CuPy's pooled free blocks, or the host's (:func:`host_free_bytes`)."""
        if not self.is_gpu:
            return host_free_bytes()
        free, _ = self.xp.cuda.runtime.memGetInfo()
        return free + self.xp.get_default_memory_pool().free_bytes()

    def release_cached(self) -> None:
        """Hand the blocks that freed arrays left in CuPy's memory pool back to the device
        (unreachable cycles collected first), so that other pools (a CUDA graph's,
        gpucfd.graphs) can have them: after a phase whose arrays are all gone."""
        gc.collect()
        if self.is_gpu:
            self.xp.get_default_memory_pool().free_all_blocks()

    def describe(self) -> str:
        if not self.is_gpu:
            return f"cpu (NumPy {np.__version__})"
        props = self.xp.cuda.runtime.getDeviceProperties(self.device_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"gpu {self.device_id}: {name} (CuPy {self.xp.__version__})"

    def time_call(self, fn: Callable[[], Any], repeat: int = 10, warmup: int = 2) -> float:
        """Median seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs.

        On the GPU the time is taken with CUDA events around each call.
        """
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            if self.is_gpu:
                start, stop = self.xp.cuda.Event(), self.xp.cuda.Event()
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times.append(self.xp.cuda.get_elapsed_time(start, stop) * 1e-3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def host_free_bytes() -> int:
    """Bytes of RAM available to this process: /proc/meminfo's MemAvailable (else the free
    pages), at most the cgroup's memory.max minus memory.current where one is set."""
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


def get_backend(device: str = "auto", local_rank: int = 0) -> Backend:
    """Resolve ``device`` ("auto", "cpu" or "gpu") to a Backend.

    ``auto`` takes the GPU when CuPy imports and sees a device, else NumPy. On the
    GPU, process ``local_rank`` takes device ``local_rank % n_devices``.
    """
    if device not in DEVICES:
        raise InputError(f"--device must be one of {', '.join(DEVICES)} (got {device!r})")
    cp = cupy_module() if device in ("auto", "gpu") else None
    if cp is None:
        if device == "gpu":
            raise InputError(
                "--device gpu requested but no CUDA GPU is usable (CuPy missing or no device); use --device cpu or auto"
            )
        return Backend("cpu", np)
    device_id = local_rank % cp.cuda.runtime.getDeviceCount()
    cp.cuda.Device(device_id).use()
    return Backend("gpu", cp, device_id)


def resolve_dtype(name: str):
    """NumPy dtype for ``--dtype`` ("float64" or "float32")."""
    if name not in DTYPES:
        raise InputError(f"--dtype must be one of {', '.join(DTYPES)} (got {name!r})")
    return np.dtype(DTYPES[name])


@functools.cache
def _cuda_module_cached(package: str, filename: str, options: tuple, device_id: int):
    cp = cupy_module()
    source = importlib.resources.files(package).joinpath(filename).read_text()
    return cp.RawModule(code=source, options=options)


def cuda_module(package: str, filename: str, options: tuple[str, ...] = ()):
    """Compiled CuPy RawModule of ``package``/``filename`` for the current device (cached)."""
    cp = cupy_module()
    if cp is None:
        raise RuntimeError("cuda_module needs CuPy and a CUDA device")
    return _cuda_module_cached(package, filename, tuple(options), cp.cuda.Device().id)


class PhaseTimer:
    """Wall-clock seconds accumulated per named phase, each second in one phase at most.

    ``with timer("cg"): ...`` synchronises the device before and after, so GPU work
    is charged to the phase that issued it (no synchronisation inside the phase).
    :meth:`charge` records an interval that began before the timer existed (a set-up).
    The intervals recorded never overlap: a phase entered inside another, or an interval
    charged from before the end of one already recorded, is a RuntimeError. Their sum
    is therefore at most the wall-clock time from the first one's start to the last
    one's end.
    """

    def __init__(self, backend: Backend):
        self.backend = backend
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: str | None = None  # the phase being timed
        self._end = -float("inf")  # time.perf_counter() at the end of the last interval recorded

    @contextmanager
    def __call__(self, name: str):
        self._check(name, None)
        self.backend.synchronize()
        self._open, t0 = name, time.perf_counter()
        try:
            yield
        finally:
            self._open = None
            self._record(name, t0)

    def charge(self, name: str, since: float) -> None:
        """Charge to ``name`` the time from ``since`` (a time.perf_counter() value of this
        process) to now, once the device has finished the work issued meanwhile."""
        self._check(name, since)
        self._record(name, since)

    def _check(self, name: str, since: float | None) -> None:
        if self._open is not None:
            raise RuntimeError(f"phase {name!r} started inside phase {self._open!r}: its seconds would count in both")
        if since is not None and not self._end <= since <= time.perf_counter():
            raise RuntimeError(
                f"the interval charged to {name!r} overlaps one already recorded or starts in the future"
            )

    def _record(self, name: str, t0: float) -> None:
        self.backend.synchronize()
        self._end = time.perf_counter()
        self.seconds[name] += self._end - t0

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)


_IMPORTED = time.perf_counter()  # the import of this module: this process has run at least since then


def process_seconds() -> tuple[float, str]:
    """(wall-clock seconds since this process started, what they count from): on Linux
    "process start", the kernel's start time of the process (/proc/self/stat, in clock
    ticks: taken one tick late, so a lower bound); elsewhere, or when that is not
    readable, "gpucfd import", the import of this module (gpucfd.backend). Never less than the
    time since that import, so every interval timed with time.perf_counter() after it
    lies inside."""
    since_import = time.perf_counter() - _IMPORTED
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after "pid (name)": field 3 onwards
        tick = 1.0 / os.sysconf("SC_CLK_TCK")
        age = (
            time.clock_gettime(time.CLOCK_BOOTTIME) - (int(fields[19]) + 1) * tick
        )  # field 22: start, ticks after boot
    except (OSError, ValueError, IndexError, AttributeError):
        return since_import, "gpucfd import"
    return max(age, since_import), "process start"
