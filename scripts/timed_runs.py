"""A fem3d command timed as a user runs it: in its own process, its summary and memory peak read back.

Imported from scripts/ (the folder of the running script) by the benchmarks that time whole runs.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from script_options import check_each

DEVICE_MIB = "FEM3D_BENCH_DEVICE_MIB"  # environment: the MiB of GPU memory a run sees (hold_beyond)


def hold_beyond(mib: int):
    """Hold the current GPU's memory beyond ``mib`` MiB (as cudaMemGetInfo counts it) by one
    cudaMalloc outside CuPy's pool, until the process ends: the run sees the memory of a
    smaller GPU (81559 MiB: an H100 80GB's) and meets its limit as there, where CuPy's pool
    releases its cached blocks and retries a failed allocation (CUPY_GPU_MEMORY_LIMIT refuses
    at once instead). Returns the pointer; SystemExit where the GPU has less free memory
    than it would hold."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    held = total - mib * 2**20
    if held <= 0 or held > free:
        raise SystemExit(f"{DEVICE_MIB}={mib}: the GPU has {total / 2**20:.0f} MiB, {free / 2**20:.0f} MiB free")
    return cupy.cuda.runtime.malloc(held)


def add_device_mib(ap) -> None:
    """The --device-mib option of a benchmark whose runs may see a smaller GPU (:func:`hold_beyond`)."""
    ap.add_argument(
        "--device-mib",
        type=int,
        help="the GPU's memory as the runs see it, in MiB (the rest held outside CuPy's pool: a smaller GPU's, "
        "e.g. 81559 for an H100 80GB)",
    )


def device_mib_environment(mib: int | None) -> dict | None:
    """The environment a run adds for --device-mib ``mib`` (None: none added); InputError for a
    value outside 1024 to 10^7."""
    if mib is None:
        return None
    check_each("--device-mib", [mib], 1024, 10**7, integer=True)
    return {DEVICE_MIB: str(mib)}


def device_mib_note(rows: list) -> str:
    """The words of a record's header on the GPU memory its ``rows`` saw (their "device_mib";
    empty where every run saw the whole GPU)."""
    seen = sorted({r["device_mib"] for r in rows if r.get("device_mib")})
    if not seen:
        return ""
    shown = ", ".join(map(str, seen))
    return f"the GPU's memory seen as {shown} MiB (`--device-mib`: the rest held outside CuPy's pool); "


def record_memory(main, argv) -> int:
    """Run a command's ``main(argv)`` in this process, then save memory.json beside its
    summary (the ``--out`` folder): CuPy's pool at its size after the run (None without a
    GPU) and this process's peak resident size, in bytes, also when ``main`` raises. With
    DEVICE_MIB set in the environment the GPU is first seen as that many MiB (:func:`hold_beyond`)."""
    from gpucfd.backend import cupy_module

    if os.environ.get(DEVICE_MIB):
        hold_beyond(int(os.environ[DEVICE_MIB]))
    try:
        return main(argv)
    finally:  # also after a run that stops with an error (not converged: ConvergenceError, exit 3)
        cp = cupy_module()
        pool = cp.get_default_memory_pool().total_bytes() if cp is not None and "cpu" not in argv else None
        out = argv[argv.index("--out") + 1]
        os.makedirs(out, exist_ok=True)  # a run refused before writing anything (exit 2) has made no folder
        with open(os.path.join(out, "memory.json"), "w") as fh:
            json.dump(
                {"device_pool_bytes": pool, "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024},
                fh,
            )


def child_environment(env: dict | None) -> dict | None:
    """This process's environment with ``env`` added, a variable set to None removed (None: inherit it unchanged)."""
    return None if env is None else {k: v for k, v in {**os.environ, **env}.items() if v is not None}


def timed_child(script: str, args: list, out: str, env: dict | None = None) -> tuple[float, dict, dict]:
    """Run ``python script --child args`` (a script whose --child calls record_memory; with
    ``env`` added to its environment: :func:`child_environment`) and return (process wall seconds, its summary.json,
    its memory.json) from ``out``; exit with the child's code and its stderr unless it
    solved (0) or reported no convergence (3)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.abspath(script), "--child", *args],
        capture_output=True,
        text=True,
        env=child_environment(env),
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 3):
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    with open(os.path.join(out, "memory.json")) as fh:
        memory = json.load(fh)
    return wall, summary, memory


def time_row(spec: dict, command: str, wall: float, s: dict) -> dict:
    """The fields every benchmark of a run in time records (``spec`` with "dt", its command,
    its process wall ``wall`` in s), from the run's summary.json ``s``."""
    t = s["time"]
    return {
        **spec,
        "command": command,
        "device": s["device"],
        "converged": s["converged"],
        "elements": s["mesh"]["elements"],
        "unknowns": s["dofs"],
        "time_step": spec["dt"],
        "steps": t["steps"],
        "rejected_steps": t["rejected_steps"],
        "dt_range": t["dt_range"],
        "newton_steps": t["newton_steps"],
        "linear_iterations_per_newton_step": t["linear_iterations_per_newton_step"],
        "seconds_per_step": t["seconds_per_step"],
        "wall_s": wall,
    }
