"""Running the solver on every rank of an MPI job (one rank per GPU).

The entry points (fem3d.cavity, fem3d.verify) call these the same way on one process
and on many: :func:`start` makes the backend and communicator and checks that every
rank got the same command line, fem3d.parallel.partition.distribute cuts the mesh and
:func:`partitioned_system` gives each rank the equations on its part, :func:`write_solution_vtu` writes one VTU (one
rank) or a piece per rank joined by a PVTU file, and :func:`rank_report` gathers
what each rank did and how long it computed and communicated.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..parallel.comm import COMMS, check_same_arguments, setup
from .navier_stokes import NavierStokesSystem
from ..discretisation.output import write_pvtu, write_vtu


def add_parallel_arguments(ap) -> None:
    """--comm, --allow-shared-gpu and --overlap."""
    g = ap.add_argument_group("parallel runs (mpirun -n P python -m ...)")
    g.add_argument(
        "--comm",
        default="auto",
        help=f"{', '.join(COMMS)}: how ranks communicate (default auto: serial for one "
        "rank, NCCL between GPUs when CuPy has it, else MPI through host memory)",
    )
    g.add_argument("--allow-shared-gpu", action="store_true", help="let several ranks share one GPU (testing only)")
    g.add_argument(
        "--overlap",
        action="store_true",
        help="compute each product's interior elements while its interface "
        "sum travels (off by default: it was not faster where the exchanges wait on the slowest rank rather "
        "than on the link; docs/parallel.md)",
    )


def start(args, argv):
    """(backend, communicator) of this process; InputError on every rank for an unknown
    device or communicator, too few GPUs, or ranks given different arguments."""
    backend, comm = setup(args.device, args.comm, args.allow_shared_gpu, args.overlap)
    check_same_arguments(comm, argv)
    return backend, comm


def partitioned_system(
    problem,
    part,
    backend,
    matrix_dtype: str = "float64",
    prepared_since: float | None = None,
    assembly: str = "element",
    timer=None,
) -> NavierStokesSystem:
    """The equations of ``problem`` on this rank's part (fem3d.parallel.partition.distribute)
    (collective: every rank calls it), with the run's data preparation charged to its
    timer once: from ``prepared_since`` (time.perf_counter() where the caller began to
    prepare the run: read or build the mesh, cut it; default: this call) until the system
    is ready on the device. The one place where data_preparation is timed. ``assembly``:
    NavierStokesSystem's; ``timer``: a PhaseTimer the run's systems share (mesh sequencing),
    default a new one."""
    since = time.perf_counter() if prepared_since is None else prepared_since
    local = problem if part.dist.is_serial else problem.restricted(part.mesh, part.nodes)
    system = NavierStokesSystem(local, backend, part.dist, matrix_dtype, assembly=assembly, timer=timer)
    system.timer.charge("data_preparation", since)
    return system


def node_sum(part):
    """The function completing per-node host sums (n_nodes, k) of this rank's part over all ranks."""

    def complete(a):
        full = np.zeros((part.dist.n,) + a.shape[1:])
        full[: len(a)] = a
        return part.dist.sum_interface(full)[: len(a)]

    return complete


def write_solution_vtu(out: str, stem: str, part, x_local: np.ndarray, comm) -> str:
    """``out/stem.vtu`` on one rank; on several, ``out/stem_<rank>.vtu`` from every rank
    and ``out/stem.pvtu`` joining them (written by rank 0). Returns the file name to open."""
    if comm.size == 1:
        write_vtu(os.path.join(out, f"{stem}.vtu"), part.mesh, x_local)
        return f"{stem}.vtu"
    piece = f"{stem}_{comm.rank}.vtu"
    components = write_vtu(os.path.join(out, piece), part.mesh, x_local, node_sum=node_sum(part))
    pieces = comm.gather(piece)
    if comm.rank == 0:
        write_pvtu(os.path.join(out, f"{stem}.pvtu"), pieces, components)
    return f"{stem}.pvtu"


def solution_vtu_patterns(stem: str) -> list[str]:
    """Glob patterns of every file :func:`write_solution_vtu` may write for ``stem``, on any
    number of ranks: the stale files of an earlier run (gpucfd.output.claim_output)."""
    return [f"{stem}.vtu", f"{stem}.pvtu", f"{stem}_*.vtu"]


def rank_report(comm, system, part, backend, linear=None) -> list | None:
    """Per rank (on rank 0, None elsewhere): elements, unknowns, interface unknowns, the
    neighbouring ranks (those it shares unknowns with), device, whether products overlap
    their interface sums (--overlap), seconds per phase, seconds
    communicating and computing (phases minus communication), the communicator's traffic
    (reductions, exchanges, messages and bytes; fem3d.parallel.comm), and for the multigrid
    solver ``linear`` its V-cycles and each level's interface sums (Multigrid.traffic; None
    for the paper solver)."""
    phases = system.timer.as_dict()
    mine = {
        "rank": comm.rank,
        "elements": int(part.mesh.n_elements),
        "unknowns": int(part.dist.n),
        "interface_unknowns": int(len(part.dist.interface)),
        "neighbours": [int(q) for q in part.dist.shared],
        "device": backend.describe(),
        "communicator": comm.name,
        "overlap": comm.overlap,
        "times_s": phases,
        "communication_s": comm.seconds,
        "compute_s": max(0.0, sum(phases.values()) - comm.seconds),
        "traffic": dict(comm.traffic),
        "multigrid": getattr(linear, "traffic", lambda: None)(),
    }
    return comm.gather(mine)


def partition_balance(per_rank: list | None) -> dict | None:
    """The partition in figures from :func:`rank_report`'s list (None for one rank): elements
    per rank (least, most) and the imbalance (most over the mean), the most interface
    unknowns and neighbours of a rank."""
    if not per_rank or len(per_rank) < 2:
        return None
    elements = [r["elements"] for r in per_rank]
    return {
        "elements": [min(elements), max(elements)],
        "imbalance": max(elements) * len(elements) / sum(elements),
        "interface_unknowns": max(r["interface_unknowns"] for r in per_rank),
        "neighbours": max(len(r["neighbours"]) for r in per_rank),
    }


def partition_line(balance: dict) -> str:
    """One line of :func:`partition_balance`'s figures."""
    lo, hi = balance["elements"]
    n = balance["neighbours"]
    return (
        f"partition: {lo}-{hi} elements per rank (imbalance {balance['imbalance']:.3f}); a rank shares at most "
        f"{balance['interface_unknowns']} unknowns, with at most {n} other rank{'' if n == 1 else 's'}"
    )
