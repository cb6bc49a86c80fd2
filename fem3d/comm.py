"""Communicators: how the ranks of a run sum small vectors and exchange interface entries.

SerialComm  one process; every operation is a no-op.
MPIComm     mpi4py; device arrays are staged through host memory (works everywhere).
NcclComm    device arrays through NCCL (cupy.cuda.nccl), bootstrapped over MPI;
            host arrays and Python objects still go over MPI.

All share one interface: ``allreduce(buf)`` sums a float64 array over the ranks in
place, ``exchange({peer: array})`` sends each float64 array to its peer and returns
what each peer sent back (same lengths both ways, same kind of array), plus object
collectives for set-up and output. ``seconds`` accumulates the time spent
communicating (the device is synchronised around each call so that the time is
charged here, not to the next computation).

:func:`setup` picks the communicator and this rank's device: under MPI each rank takes
GPU ``local_rank % n_gpus`` (local rank from a shared-memory split of COMM_WORLD).
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

import numpy as np

from .backend import cupy_module, get_backend
from .errors import InputError

COMMS = ("auto", "serial", "mpi", "nccl")
_ACTIVE = []  # the communicator of this process once setup() has made one


def active():
    """The communicator made by :func:`setup` (None before): error handlers use it to
    stop every rank when one fails."""
    return _ACTIVE[-1] if _ACTIVE else None


class SerialComm:
    """A run of one process."""

    name = "serial"
    rank, size, local_rank, local_size = 0, 1, 0, 1

    def __init__(self):
        self.seconds = 0.0

    def allreduce(self, buf):
        return buf

    def allreduce_scalar(self, value: float) -> float:
        return value

    def exchange(self, sends: dict) -> dict:
        return {}

    def exchange_objects(self, sends: dict) -> dict:
        return {}

    def bcast(self, obj):
        return obj

    def gather(self, obj) -> list:
        return [obj]

    def allgather(self, obj) -> list:
        return [obj]

    def abort(self, code: int) -> None:
        sys.exit(code)


class MPIComm(SerialComm):
    """mpi4py communicator; device arrays go through host buffers."""

    name = "mpi"

    def __init__(self, mpi_comm, backend):
        super().__init__()
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = mpi_comm
        self.backend = backend
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        local = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        local.Free()

    def _start(self) -> float:
        self.backend.synchronize()
        return time.perf_counter()

    def allreduce(self, buf):
        t0 = self._start()
        host = np.ascontiguousarray(self.backend.to_numpy(buf), dtype=np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)
        buf[...] = host if isinstance(buf, np.ndarray) else self.backend.asarray(host)
        self.seconds += time.perf_counter() - t0
        return buf

    def allreduce_scalar(self, value: float) -> float:
        t0 = time.perf_counter()
        out = self.comm.allreduce(float(value), op=self.MPI.SUM)
        self.seconds += time.perf_counter() - t0
        return out

    def exchange(self, sends: dict) -> dict:
        t0 = self._start()
        on_host = all(isinstance(a, np.ndarray) for a in sends.values())
        host = {q: np.ascontiguousarray(self.backend.to_numpy(a), dtype=np.float64) for q, a in sends.items()}
        recv = {q: np.empty_like(a) for q, a in host.items()}
        reqs = [self.comm.Irecv(recv[q], source=q, tag=17) for q in recv]
        reqs += [self.comm.Isend(host[q], dest=q, tag=17) for q in host]
        self.MPI.Request.Waitall(reqs)
        out = recv if on_host else {q: self.backend.asarray(a) for q, a in recv.items()}
        self.seconds += time.perf_counter() - t0
        return out

    def exchange_objects(self, sends: dict) -> dict:
        t0 = time.perf_counter()
        reqs = [self.comm.isend(obj, dest=q, tag=23) for q, obj in sends.items()]
        out = {q: self.comm.recv(source=q, tag=23) for q in sends}
        self.MPI.Request.Waitall(reqs)
        self.seconds += time.perf_counter() - t0
        return out

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def gather(self, obj) -> list:
        return self.comm.gather(obj, root=0)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def abort(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


class NcclComm(MPIComm):
    """NCCL for device arrays (allreduce, point-to-point), MPI for the rest."""

    name = "nccl"

    def __init__(self, mpi_comm, backend):
        super().__init__(mpi_comm, backend)
        from cupy.cuda import nccl

        self.nccl = nccl
        uid = nccl.get_unique_id() if self.rank == 0 else None
        self.nc = nccl.NcclCommunicator(self.size, mpi_comm.bcast(uid, root=0), self.rank)

    def allreduce(self, buf):
        if isinstance(buf, np.ndarray):
            return super().allreduce(buf)
        t0 = self._start()
        stream = self.backend.xp.cuda.get_current_stream().ptr
        self.nc.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self.nccl.NCCL_FLOAT64, self.nccl.NCCL_SUM, stream)
        self.backend.synchronize()
        self.seconds += time.perf_counter() - t0
        return buf

    def exchange(self, sends: dict) -> dict:
        if any(isinstance(a, np.ndarray) for a in sends.values()):
            return super().exchange(sends)
        t0 = self._start()
        xp = self.backend.xp
        stream = xp.cuda.get_current_stream().ptr
        sends = {q: xp.ascontiguousarray(a, dtype=np.float64) for q, a in sends.items()}
        recv = {q: xp.empty_like(a) for q, a in sends.items()}
        self.nccl.groupStart()
        for q, a in sends.items():
            self.nc.send(a.data.ptr, a.size, self.nccl.NCCL_FLOAT64, q, stream)
            self.nc.recv(recv[q].data.ptr, a.size, self.nccl.NCCL_FLOAT64, q, stream)
        self.nccl.groupEnd()
        self.backend.synchronize()
        self.seconds += time.perf_counter() - t0
        return recv


def launched_ranks() -> int:
    """Number of ranks the MPI launcher started, from its environment (1 if none)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def setup(device: str = "auto", comm: str = "auto", allow_shared_gpu: bool = False):
    """(backend, communicator) of this process.

    ``comm``: auto (serial for one rank; NCCL when the ranks run on GPUs and CuPy has
    NCCL, else MPI), serial, mpi or nccl. Under MPI the device of each rank is its
    node-local rank modulo the node's GPUs; more ranks than GPUs on a node is an error
    unless ``allow_shared_gpu``.
    """
    launched = launched_ranks()
    mpi_world = _mpi_world() if launched > 1 or comm in ("mpi", "nccl") else None  # first: errors then print once
    if comm not in COMMS:
        raise InputError(f"--comm must be one of {', '.join(COMMS)} (got {comm!r})")
    if mpi_world is None:
        backend, world = get_backend(device), SerialComm()
        _ACTIVE.append(world)
        return backend, world
    if comm == "serial":
        raise InputError(f"--comm serial but started as {launched} MPI ranks; use --comm auto, mpi or nccl")
    from mpi4py import MPI

    local = mpi_world.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    cp = cupy_module() if device in ("auto", "gpu") else None
    if cp is not None:
        n_gpus = cp.cuda.runtime.getDeviceCount()
        if local_size > n_gpus and not allow_shared_gpu:
            raise InputError(f"{local_size} ranks on this node but only {n_gpus} GPU(s); start at most {n_gpus} ranks per node "
                             "or pass --allow-shared-gpu")
    backend = get_backend(device, local_rank)
    if comm == "nccl" and not (backend.is_gpu and _has_nccl()):
        raise InputError("--comm nccl needs GPUs and CuPy built with NCCL")
    use_nccl = comm == "nccl" or (comm == "auto" and backend.is_gpu and _has_nccl() and mpi_world.Get_size() > 1)
    world = (NcclComm if use_nccl else MPIComm)(mpi_world, backend)
    _ACTIVE.append(world)
    return backend, world


def _mpi_world():
    """MPI's COMM_WORLD, registered (on host buffers) as the active communicator so that
    errors from here on are printed by rank 0 alone or stop every rank."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise InputError(f"started as {launched_ranks()} MPI ranks, or --comm mpi/nccl given, but mpi4py is not "
                         "installed (pip install mpi4py)") from None
    _ACTIVE.append(MPIComm(MPI.COMM_WORLD, get_backend("cpu")))
    return MPI.COMM_WORLD


def _has_nccl() -> bool:
    try:
        from cupy.cuda import nccl

        return bool(getattr(nccl, "available", True))
    except Exception:
        return False


@contextmanager
def agreed_errors(comm):
    """Run the block on every rank; an InputError on any rank is raised on all of them
    (the first rank's message), so that no rank is left waiting in a collective. The
    block itself must not communicate (a rank that failed early would not join)."""
    message = None
    try:
        yield
    except InputError as exc:
        message = str(exc)
    messages = comm.allgather(message)
    first = next((m for m in messages if m), None)
    if first is not None:
        raise InputError(first)


def check_same_arguments(comm, argv) -> None:
    """InputError on every rank unless all ranks were given the same arguments."""
    every = comm.allgather(list(argv))
    differ = [r for r, a in enumerate(every) if a != every[0]]
    if differ:
        raise InputError(f"ranks disagree on the arguments: rank {differ[0]} got {' '.join(every[differ[0]])!r}, "
                         f"rank 0 got {' '.join(every[0])!r}; give every rank the same command line")
