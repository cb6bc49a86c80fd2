"""CPU thread pools of processes started by an MPI launcher.

NumPy's and SciPy's BLAS (OpenBLAS) start a pool of one thread per core in every
process, so k ranks on one machine run k times as many threads as it has cores. On two
cores, ``mpiexec -n 2 python -m fem3d.cavity --re 400 --n 8 --device cpu`` took 3.5 s so,
and 1.5 s with one BLAS thread per rank. :func:`share_cores_among_ranks` divides the
cores among the ranks. The pools are sized when the libraries load, so it must run
before NumPy is imported: importing gpucfd runs it, and fem3d imports gpucfd first.
"""
from __future__ import annotations

import os

LOCAL_RANKS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")  # ranks on this machine: Open MPI, MPICH (Hydra)
POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # thread-pool sizes of the BLAS libraries


def share_cores_among_ranks(environ=os.environ) -> None:
    """In one of k > 1 ranks on this machine (the launcher's variables LOCAL_RANKS), set
    each pool size of POOLS that ``environ`` does not set to max(1, cores // k), cores
    being those this process may run on; otherwise change nothing."""
    k = next((int(environ[v]) for v in LOCAL_RANKS if environ.get(v, "").isdigit()), 1)
    if k <= 1:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for v in POOLS:
        environ.setdefault(v, str(max(1, cores // k)))
