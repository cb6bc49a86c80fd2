"""CPU thread pools and CPUs: those of processes started by an MPI launcher, and the stacks
of small matrix products spread over the cores.

NumPy's and SciPy's BLAS (OpenBLAS) start a pool of one thread per core in every
process, so k ranks on one machine run k times as many threads as it has cores, which
slows a run down (docs/parallel.md, CPU ranks). :func:`share_cores_among_ranks` divides the
cores among the ranks. The pools are sized when the libraries load: importing gpucfd runs
it, fem3d imports gpucfd first, and where NumPy was imported before (a user's script or
ours), the pools already loaded are resized through threadpoolctl (docs/parallel.md, CPU
ranks).

Open MPI binds each of one or two ranks to a single core by default. A GPU rank runs
more than one busy thread (CUDA's, NCCL's set-up and proxy threads, fem3d's NCCL
set-up), and on one core they take turns. So a rank bound to fewer CPUs than its share of
the machine gets its share (:func:`rank_cpus`; docs/parallel.md, CPU cores of a GPU rank).
"""

from __future__ import annotations

import functools
import os
import sys

LOCAL_RANKS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")  # ranks on this machine: Open MPI, MPICH (Hydra)
LOCAL_RANK = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")  # this process's rank among them
POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # thread-pool sizes of the BLAS libraries
SPLIT_ENTRIES = 1 << 20  # matrix entries of a stack below which one thread multiplies it (a hand-off costs ~50 us)


def _launcher_value(environ, names) -> int | None:
    return next((int(environ[v]) for v in names if environ.get(v, "").isdigit()), None)


def rank_cpus(rank: int, ranks: int, cpus) -> list:
    """The CPUs of local rank ``rank`` of ``ranks`` on a machine with ``cpus``: the rank-th of
    ``ranks`` contiguous blocks of the sorted ids, as even as they go (empty for more ranks
    than CPUs)."""
    cpus = sorted(cpus)
    return cpus[rank * len(cpus) // ranks : (rank + 1) * len(cpus) // ranks]


def _os_affinity():
    """(get, set, machine) of :func:`share_cores_among_ranks` from the operating system; set
    None where it has no CPU affinity (macOS, Windows)."""
    if not hasattr(os, "sched_getaffinity"):
        every = set(range(os.cpu_count() or 1))
        return (lambda: every), None, (lambda: every)

    def machine():  # the CPUs the launcher may use: its own (the parent process's), else every CPU
        try:
            return os.sched_getaffinity(os.getppid())
        except OSError:
            return set(range(os.cpu_count() or 1))

    return (lambda: os.sched_getaffinity(0)), (lambda cpus: os.sched_setaffinity(0, cpus)), machine


def share_cores_among_ranks(environ=os.environ, affinity=None) -> None:
    """In one of k > 1 ranks on this machine (the launcher's variables LOCAL_RANKS and
    LOCAL_RANK): a process bound to fewer CPUs than its share :func:`rank_cpus` of the
    machine is given that share, and each pool size of POOLS that ``environ`` does not set
    becomes that share's size, or else max(1, cores // k), cores being those this process
    may run on; BLAS pools loaded already (NumPy imported first) are resized to it where
    OPENBLAS_NUM_THREADS was not set. Otherwise change nothing. ``affinity``: (get, set,
    machine) functions: this process's CPUs (a set of ids), give it these CPUs, the
    machine's CPUs (default :func:`_os_affinity`)."""
    k = _launcher_value(environ, LOCAL_RANKS) or 1
    if k <= 1:
        return
    get, put, machine = affinity or _os_affinity()
    mine, rank = get(), _launcher_value(environ, LOCAL_RANK)
    share = rank_cpus(rank, k, machine()) if put and rank is not None and rank < k else []
    size = max(1, len(mine) // k)
    if len(mine) < len(share):
        try:
            put(share)
            size = len(share)
        except OSError:  # CPUs this process may not have: keep the binding
            pass
    unset = POOLS[0] not in environ
    for v in POOLS:
        environ.setdefault(v, str(size))
    if unset and environ is os.environ and "numpy" in sys.modules:  # its BLAS pool is sized already
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # installed without its dependencies (pip --no-deps): the pools stay as loaded
            return
        threadpool_limits(size, user_api="blas")


@functools.cache
def _pool():
    """(threads, executor or None): as many workers as OpenBLAS's pool (its size set by the
    user or by :func:`share_cores_among_ranks`), else one per core."""
    from concurrent.futures import ThreadPoolExecutor

    size = os.environ.get("OPENBLAS_NUM_THREADS", "")
    threads = max(1, int(size)) if size.isdigit() else len(_os_affinity()[0]())
    return threads, ThreadPoolExecutor(threads, thread_name_prefix="gpucfd") if threads > 1 else None


def batched_matvec(mats, x, transpose: bool = False):
    """(E, m) NumPy array of the products mats[e] @ x[e] (``transpose``: mats[e].T @ x[e],
    m = n) of a NumPy stack ``mats`` (E, m, n) and ``x`` (E, n), in their common dtype. A stack of at
    least SPLIT_ENTRIES entries is cut into contiguous element ranges multiplied at once on
    :func:`_pool`'s threads (matmul releases the GIL); each element's product is the same
    whatever the cut. Faster than einsum (docs/performance.md, host-side kernels)."""
    import numpy as np

    out = np.empty(mats.shape[:2] if not transpose else x.shape, dtype=np.result_type(mats, x))

    def part(s):
        if transpose:
            np.matmul(x[s, None, :], mats[s], out=out[s, None, :])
        else:
            np.matmul(mats[s], x[s, :, None], out=out[s, :, None])

    threads, pool = _pool()
    if pool is None or mats.size < SPLIT_ENTRIES:
        part(slice(None))
        return out
    edges = np.linspace(0, len(mats), threads + 1).astype(int)
    for done in [pool.submit(part, slice(a, b)) for a, b in zip(edges[:-1], edges[1:])]:
        done.result()
    return out
