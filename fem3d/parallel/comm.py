"""Communicators: how the ranks of a run sum small vectors and exchange interface entries.

SerialComm  one process; every operation is a no-op.
MPIComm     mpi4py; device arrays are staged through host memory (works everywhere).
NcclComm    device arrays through NCCL (cupy.cuda.nccl), bootstrapped over MPI;
            host arrays and Python objects still go over MPI.

All share one interface: ``allreduce(buf)`` sums a float64 array over the ranks in
place, ``exchange(sends, recvs)`` sends each float64 array sends[peer] to its peer and
receives into recvs[peer] (same shapes both ways), in two halves where work goes on
between them: ``start_exchange`` (the messages on their way: non-blocking MPI, or NCCL,
with --overlap on a stream of its own that waits for the work queued before) and
``finish_exchange`` (the received arrays ready for what is queued after), plus object
collectives for set-up and output. ``seconds`` is the time spent communicating: host-staged calls are
timed with the device synchronised around them; NCCL calls stay asynchronous on the
device's stream and are timed there with CUDA events. ``traffic`` counts what this rank
did: reductions (``allreduce`` and ``allreduce_scalar`` calls) and their bytes, exchanges
(``exchange`` calls: each a point of synchronisation with the peers), the messages sent
and their bytes; the set-up's collectives of Python objects are not counted.

:func:`setup` picks the communicator and this rank's device: under MPI each rank takes
GPU ``local_rank % n_gpus`` (local rank from a shared-memory split of COMM_WORLD).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from gpucfd.backend import cupy_module, get_backend
from gpucfd.errors import InputError, set_communicator

COMMS = ("auto", "serial", "mpi", "nccl")


class SerialComm:
    """A run of one process."""

    name = "serial"
    rank, size, local_rank, local_size = 0, 1, 0, 1
    overlap = (
        False  # products overlap their interface sums with the interior elements (--overlap; never on one process)
    )

    def __init__(self):
        self._seconds = 0.0
        self.traffic = {"reductions": 0, "reduction_bytes": 0, "exchanges": 0, "messages": 0, "message_bytes": 0}

    def _count_reduction(self, nbytes: int) -> None:
        self.traffic["reductions"] += 1
        self.traffic["reduction_bytes"] += int(nbytes)

    def _count_exchange(self, sends: dict) -> None:
        self.traffic["exchanges"] += 1
        self.traffic["messages"] += len(sends)
        self.traffic["message_bytes"] += sum(int(a.size) * 8 for a in sends.values())  # float64 on the wire

    @property
    def seconds(self) -> float:
        """Seconds spent communicating so far."""
        return self._seconds

    def allreduce(self, buf):
        return buf

    def allreduce_scalar(self, value: float) -> float:
        return value

    def connect(self, peers) -> None:
        """Open the links to ``peers`` (a rank lists those that list it) before the first
        exchange with them; collective. Only NCCL has links to open."""

    def exchange(self, sends: dict, recvs: dict) -> None:
        self.finish_exchange(self.start_exchange(sends, recvs))

    def start_exchange(self, sends: dict, recvs: dict):
        """Start sending sends[peer] and receiving recvs[peer]; returns what finish_exchange needs."""
        return None

    def finish_exchange(self, pending) -> None:
        """Wait for the exchange ``pending`` (from start_exchange): recvs filled."""

    def exchange_objects(self, sends: dict) -> dict:
        return {}

    def bcast(self, obj):
        return obj

    def gather(self, obj) -> list:
        return [obj]

    def bcast_array(self, a: np.ndarray) -> np.ndarray:
        """Rank 0's host array ``a`` in every rank's ``a`` (same shape and dtype everywhere), not pickled."""
        return a

    def allgather(self, obj) -> list:
        return [obj]

    def gatherv(self, a: np.ndarray, everyone: bool = False):
        """Every rank's 1D NumPy array ``a`` (one dtype on every rank) joined in rank order:
        on rank 0 (None elsewhere), or with ``everyone`` on every rank."""
        return a

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
        self._count_reduction(buf.size * 8)
        host = np.ascontiguousarray(self.backend.to_numpy(buf), dtype=np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, host, op=self.MPI.SUM)
        buf[...] = host if isinstance(buf, np.ndarray) else self.backend.asarray(host)
        self._seconds += time.perf_counter() - t0
        return buf

    def allreduce_scalar(self, value: float) -> float:
        t0 = time.perf_counter()
        self._count_reduction(8)
        out = self.comm.allreduce(float(value), op=self.MPI.SUM)
        self._seconds += time.perf_counter() - t0
        return out

    def start_exchange(self, sends: dict, recvs: dict):
        """Non-blocking MPI through host buffers (device arrays copied there first)."""
        t0 = self._start()
        self._count_exchange(sends)
        on_host = all(isinstance(a, np.ndarray) for a in recvs.values())
        host = {q: np.ascontiguousarray(self.backend.to_numpy(a), dtype=np.float64) for q, a in sends.items()}
        into = recvs if on_host else {q: np.empty(a.shape, dtype=np.float64) for q, a in recvs.items()}
        reqs = [self.comm.Irecv(into[q], source=q, tag=17) for q in into]
        reqs += [self.comm.Isend(host[q], dest=q, tag=17) for q in host]
        self._seconds += time.perf_counter() - t0
        return reqs, host, into, None if on_host else recvs

    def finish_exchange(self, pending) -> None:
        t0 = time.perf_counter()
        reqs, _, into, device = pending
        self.MPI.Request.Waitall(reqs)
        for q, a in (device or {}).items():
            a[...] = self.backend.asarray(into[q])
        self._seconds += time.perf_counter() - t0

    def exchange_objects(self, sends: dict) -> dict:
        t0 = time.perf_counter()
        reqs = [self.comm.isend(obj, dest=q, tag=23) for q, obj in sends.items()]
        out = {q: self.comm.recv(source=q, tag=23) for q in sends}
        self.MPI.Request.Waitall(reqs)
        self._seconds += time.perf_counter() - t0
        return out

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def gather(self, obj) -> list:
        return self.comm.gather(obj, root=0)

    def bcast_array(self, a: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        self.comm.Bcast(a, root=0)
        self._seconds += time.perf_counter() - t0
        return a

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def gatherv(self, a: np.ndarray, everyone: bool = False):
        """MPI's Gatherv or Allgatherv into one buffer, not pickled."""
        a = np.ascontiguousarray(a)
        counts = self.comm.allgather(a.size)
        out = np.empty(sum(counts), dtype=a.dtype) if everyone or self.rank == 0 else None
        if everyone:
            self.comm.Allgatherv(a, [out, counts])
        else:
            self.comm.Gatherv(a, None if out is None else [out, counts], root=0)
        return out

    def abort(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


class NcclComm(MPIComm):
    """NCCL for device arrays (allreduce, point-to-point), MPI for the rest.

    Device calls are queued without waiting for them (the host goes on launching the
    next kernels), on the current stream; with ``overlap`` the exchanges go on the
    communicator's own stream, which waits for the work queued before them and which the
    current stream waits for at finish_exchange, so that the kernels queued in between
    overlap the messages;
    each is timed by a pair of CUDA events, read when ``seconds`` is asked for. The NCCL
    communicator is made on a thread of its own while the run is prepared (ncclCommInitRank
    releases the GIL), and the first use waits for it. NCCL opens its links to a peer at the
    first message and its reduction rings at the first reduction; :meth:`connect` opens them
    while the run is prepared. NCCL_MAX_NCHANNELS defaults to CHANNELS (a value set in the
    environment wins): NCCL's own channel count makes its set-up several times slower for a
    few µs less per message, and the interface messages (0.2-0.4 MB at 64^3-112^3) need no
    more (docs/parallel.md, communicator)."""

    name = "nccl"
    CHANNELS = 4

    def __init__(self, mpi_comm, backend):
        super().__init__(mpi_comm, backend)
        from cupy.cuda import nccl

        os.environ.setdefault("NCCL_MAX_NCHANNELS", str(self.CHANNELS))  # read by NCCL at its first communicator
        self.nccl = nccl
        uid = mpi_comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
        self._made = {}
        self._making = threading.Thread(target=self._make, args=(uid, backend.device_id), name="nccl-init", daemon=True)
        self._making.start()
        self._events = []
        self._linked = None
        self._stream = None  # the exchanges' stream, made at the first

    def _make(self, uid, device: int) -> None:
        """The communicator, on the thread that :meth:`nc` waits for (on this rank's device)."""
        try:
            self.backend.xp.cuda.runtime.setDevice(device)
            self._made["nc"] = self.nccl.NcclCommunicator(self.size, uid, self.rank)
        except Exception as exc:  # raised where the communicator is first used
            self._made["error"] = exc

    @property
    def nc(self):
        """The NCCL communicator (waits for its thread the first time)."""
        if self._making is not None:
            self._making.join()
            self._making = None
            if "error" in self._made:
                raise self._made["error"]
        return self._made["nc"]

    def connect(self, peers) -> None:
        new = sorted(int(q) for q in peers if self._linked is None or int(q) not in self._linked)
        first = self._linked is None
        if not new and not first:
            return
        self._linked = (self._linked or set()) | set(new)
        cp, nc, nccl = self.backend.xp, self.nc, self.nccl
        stream = cp.cuda.get_current_stream()
        buf = cp.zeros(2 * len(new) + 1)
        nccl.groupStart()
        for k, q in enumerate(new):
            nc.send(buf[2 * k :].data.ptr, 1, nccl.NCCL_FLOAT64, q, stream.ptr)
            nc.recv(buf[2 * k + 1 :].data.ptr, 1, nccl.NCCL_FLOAT64, q, stream.ptr)
        nccl.groupEnd()
        if first:  # every rank's first connect: the reduction's links too
            nc.allReduce(buf[-1:].data.ptr, buf[-1:].data.ptr, 1, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()

    @property
    def seconds(self) -> float:
        cp = self.backend.xp
        for start, stop in self._events:
            stop.synchronize()
            self._seconds += cp.cuda.get_elapsed_time(start, stop) * 1e-3
        self._events = []
        return self._seconds

    def _queue(self, issue) -> None:
        """Run ``issue(stream pointer)`` between two recorded events."""
        cp = self.backend.xp
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        issue(cp.cuda.get_current_stream().ptr)
        stop.record()
        self._events.append((start, stop))
        if len(self._events) > 4096:
            self.seconds  # noqa: B018 - folds the finished events into the total

    def allreduce(self, buf):
        if isinstance(buf, np.ndarray):
            return super().allreduce(buf)
        nc, nccl = self.nc, self.nccl
        kind = {np.dtype(np.float64): nccl.NCCL_FLOAT64, np.dtype(np.float32): nccl.NCCL_FLOAT32}[
            buf.dtype
        ]  # KeyError: other types
        if not buf.flags.c_contiguous:
            raise ValueError("NCCL allreduce needs a contiguous buffer")
        self._count_reduction(buf.nbytes)
        self._queue(lambda s: nc.allReduce(buf.data.ptr, buf.data.ptr, buf.size, kind, nccl.NCCL_SUM, s))
        return buf

    def start_exchange(self, sends: dict, recvs: dict):
        """Device arrays: NCCL's sends and receives on the current stream, or where products
        overlap their exchanges (``overlap``) on the communicator's own stream after the work
        queued on the current stream so far (host arrays: MPI)."""
        if any(isinstance(a, np.ndarray) for a in recvs.values()):
            return "mpi", super().start_exchange(sends, recvs)
        cp, nc, nccl = self.backend.xp, self.nc, self.nccl
        self._count_exchange(sends)

        def issue(stream):
            nccl.groupStart()
            for q, a in sends.items():
                nc.send(a.data.ptr, a.size, nccl.NCCL_FLOAT64, q, stream)
                nc.recv(recvs[q].data.ptr, recvs[q].size, nccl.NCCL_FLOAT64, q, stream)
            nccl.groupEnd()

        if not self.overlap:  # nothing is queued before finish_exchange: the current stream serves
            self._queue(issue)
            return "nccl", None
        if self._stream is None:
            self._stream = cp.cuda.Stream(non_blocking=True)
        self._stream.wait_event(cp.cuda.get_current_stream().record())
        with self._stream:
            self._queue(issue)
        return "nccl", self._stream.record()

    def finish_exchange(self, pending) -> None:
        """The current stream waits for the exchange (no host synchronisation)."""
        kind, what = pending
        if kind == "mpi":
            return super().finish_exchange(what)
        if what is not None:
            self.backend.xp.cuda.get_current_stream().wait_event(what)


def launched_ranks() -> int:
    """Number of ranks the MPI launcher started, from its environment (1 if none)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def setup(device: str = "auto", comm: str = "auto", allow_shared_gpu: bool = False, overlap: bool = False):
    """(backend, communicator) of this process.

    ``comm``: auto (serial for one rank; NCCL when the ranks run on GPUs of their own and
    CuPy has NCCL, else MPI), serial, mpi or nccl. Under MPI the device of each rank is its
    node-local rank modulo the node's GPUs; more ranks than GPUs on a node is an error
    unless ``allow_shared_gpu``. ``overlap``: the communicator's products overlap their
    interface sums with their interior elements (fem3d.solvers.operators.ElementOperator).
    """
    launched = launched_ranks()
    host = _mpi_world() if launched > 1 or comm in ("mpi", "nccl") else None  # first: errors then print once
    if comm not in COMMS:
        raise InputError(f"--comm must be one of {', '.join(COMMS)} (got {comm!r})")
    if host is None:
        backend, world = get_backend(device), SerialComm()
        set_communicator(world)
        return backend, world
    if comm == "serial":
        raise InputError(f"--comm serial but started as {launched} MPI ranks; use --comm auto, mpi or nccl")
    cp = cupy_module() if device in ("auto", "gpu") else None
    shared = False
    if cp is not None:
        n_gpus = cp.cuda.runtime.getDeviceCount()
        shared = host.local_size > n_gpus
        if shared and not allow_shared_gpu:
            raise InputError(
                f"{host.local_size} ranks on this node but only {n_gpus} GPU(s); start at most {n_gpus} ranks "
                "per node or pass --allow-shared-gpu"
            )
    backend = get_backend(device, host.local_rank)
    use_nccl = wants_nccl(comm, backend.is_gpu and _has_nccl(), host.size, shared)
    world = (NcclComm if use_nccl else MPIComm)(host.comm, backend)
    world.overlap = bool(overlap)
    set_communicator(world)
    return backend, world


def wants_nccl(comm: str, nccl_available: bool, ranks: int, shared_gpu: bool) -> bool:
    """Whether ranks on GPUs talk through NCCL: ``comm`` nccl asks for it (an error where
    it cannot run: no NCCL, or ranks sharing a GPU, which NCCL refuses), auto takes it for
    several ranks with a GPU each."""
    if comm == "nccl" and not nccl_available:
        raise InputError("--comm nccl needs GPUs and CuPy built with NCCL")
    if comm == "nccl" and shared_gpu:
        raise InputError(
            "--comm nccl needs one GPU per rank (NCCL refuses two ranks on one GPU); "
            "use --comm mpi with --allow-shared-gpu"
        )
    return comm == "nccl" or (comm == "auto" and nccl_available and ranks > 1 and not shared_gpu)


def _mpi_world() -> MPIComm:
    """MPI's COMM_WORLD on host buffers, registered as the active communicator so that
    errors from here on are printed by rank 0 alone or stop every rank."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise InputError(
            f"started as {launched_ranks()} MPI ranks, or --comm mpi/nccl given, but mpi4py is not "
            "installed (pip install mpi4py)"
        ) from None
    world = MPIComm(MPI.COMM_WORLD, get_backend("cpu"))
    set_communicator(world)
    return world


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
        raise InputError(
            f"ranks disagree on the arguments: rank {differ[0]} got {' '.join(every[differ[0]])!r}, "
            f"rank 0 got {' '.join(every[0])!r}; give every rank the same command line"
        )
