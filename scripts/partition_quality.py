"""How well fem3d partitions a general mesh: METIS against coordinate bisection on the DFG 3D-1Z channel.

    python scripts/partition_quality.py --refine 0 1 2 --parts 2 4 8 16 --tag cpu

Reads the mesh of meshes/dfg3d/dfg_3d_1z.toml (channel_coarse.msh, 624 hex27 elements) as
``python -m fem3d.run`` does and refines it R times (fem3d.discretisation.refine.refine). For
each R and number of ranks P it partitions the elements three ways:

  fem3d        fem3d.parallel.partition.partition_elements(mesh, P), what ``fem3d.run`` on P
               ranks uses: METIS (fem3d.parallel.partition.graph_parts) on the face graph of
               the coarse mesh, children on their parent's rank;
  rcb          recursive coordinate bisection of the coarse mesh's element centres, children
               on their parent's rank (fem3d's partitioner of general meshes before METIS;
               parts differ by at most one element);
  metis-fine   METIS on the refined mesh's own face graph, children free (reference only:
               fem3d's multigrid keeps children with their parents). Not run at R = 0.

For each partition: elements per rank (min, max, imbalance = max over mean) and the
interface as fem3d.parallel.partition.distribute_owned counts it: an unknown (3 velocity
components per Q2 node, one pressure per Q1 node) is shared when elements of more than one
rank touch it. Tabulated: the shared unknowns in all, the most any rank holds, the most any
rank sends per interface sum (Distribution.sum_interface: each shared unknown once per
peer that also holds it), and the most neighbouring ranks of any rank. Saves
benchmarks/results/partition_quality_<tag>.{json,md}. Needs pymetis (``pip install -e
.[mpi]``); exit code 2 without it.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from gpucfd.errors import ArgumentParser, InputError, run_cli
from gpucfd.output import write_record
from script_options import check_each, check_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "meshes", "dfg3d", "dfg_3d_1z.toml")


def follow_parents(mesh, coarse_part: np.ndarray) -> np.ndarray:
    """(E,) rank of each element of ``mesh`` whose coarsest ancestor's rank is ``coarse_part``."""
    if mesh.coarser is None:
        return coarse_part
    return follow_parents(mesh.coarser, coarse_part)[mesh.parent]


def coordinate_bisection(mesh, parts: int) -> np.ndarray:
    """(E,) rank of each element of ``mesh``: its element centres cut in two along their
    longest extent, the halves' counts in the ratio of the ranks they get, recursively."""
    part = np.empty(mesh.n_elements, dtype=np.int64)
    centres = mesh.geometry.mean(axis=1)
    todo = [(np.arange(mesh.n_elements), 0, parts)]
    while todo:
        idx, first, count = todo.pop()
        if count == 1:
            part[idx] = first
            continue
        pts = centres[idx]
        order = idx[np.argsort(pts[:, int(np.argmax(np.ptp(pts, axis=0)))], kind="stable")]
        left = count // 2
        cut = (len(idx) * left) // count
        todo += [(order[:cut], first, left), (order[cut:], first + left, count - left)]
    return part


class _OneRank:
    """What fem3d.parallel.partition.distribute_owned asks of a communicator: this rank and
    the number of ranks (the partition is only laid out, nothing is sent)."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def connect(self, peers) -> None:
        pass


def quality(mesh, part: np.ndarray, parts: int) -> dict:
    """Element counts and interface figures of the partition ``part`` (E,) of ``mesh``: each
    rank's unknowns laid out by fem3d.parallel.partition.distribute_owned, as a run does."""
    from fem3d.parallel.partition import distribute_owned
    from gpucfd.backend import get_backend
    from gpucfd.sets import distinct

    counts = np.bincount(part, minlength=parts)
    dists = [distribute_owned(mesh, part, _OneRank(r, parts), get_backend("cpu")).dist for r in range(parts)]
    interface = np.array([len(d.interface) for d in dists])
    sent = [sum(len(i) for i in d.shared.values()) for d in dists]  # values sent per interface sum
    total = len(distinct(np.concatenate([d.gdofs[d.interface] for d in dists])))
    return {
        "elements_min": int(counts.min()),
        "elements_max": int(counts.max()),
        "imbalance": float(counts.max() / counts.mean()),
        "empty_ranks": int(np.count_nonzero(counts == 0)),
        "interface_total": total,
        "interface_max": int(interface.max()),
        "interface_mean": float(interface.mean()),
        "sent_max": int(max(sent)),
        "neighbours_max": max(len(d.shared) for d in dists),
        "local_unknowns_max": max(d.n for d in dists),
        "interface_per_rank": interface.tolist(),
    }


def table(rows: list) -> str:
    lines = [
        (
            "| refine | elements | unknowns | P | partitioner | elements per rank min–max | imbalance "
            "| shared unknowns in all | most shared unknowns of a rank | over fem3d's | most sent by a rank "
            "| most neighbours | partition s |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['refine']} | {r['elements']:,} | {r['unknowns']:,} | {r['parts']} | {r['partitioner']} "
            f"| {r['elements_min']:,}–{r['elements_max']:,} | {r['imbalance']:.3f} | {r['interface_total']:,} "
            f"| {r['interface_max']:,} | {r['interface_max_vs_fem3d']:.2f} | {r['sent_max']:,} "
            f"| {r['neighbours_max']} | {r['partition_s']:.3f} |"
        )
    return "\n".join(lines)


def save(base: str, command: str, version: str, rows: list) -> None:
    text = table(rows)
    write_record(
        base,
        {"command": command, "case": os.path.relpath(CASE, ROOT), "pymetis": version, "rows": rows},
        "# Partition quality on the DFG 3D-1Z channel: fem3d's METIS partition against coordinate bisection (CPU)\n\n"
        f"`{command}`\n\n"
        "fem3d: fem3d.parallel.partition.partition_elements (METIS on the coarse mesh's face graph, seed 0, "
        "children on their parent's rank; what fem3d.run uses); rcb: recursive coordinate bisection of the "
        "coarse mesh's element centres, children on their parent's rank (fem3d's partitioner of general "
        "meshes before METIS); metis-fine: METIS on the refined mesh's own face graph, children free "
        f"(reference). pymetis {version}: recursive bisection for P ≤ 8, k-way for P > 8. Imbalance: most "
        "elements of a rank over the mean. Shared unknowns: velocity (3 per Q2 node) and pressure (Q1 node) "
        "unknowns touched by elements of more than one rank, as fem3d.parallel.partition.distribute_owned "
        "counts them; a rank's: those it holds; over fem3d's: the most shared unknowns of a rank over the "
        "fem3d row's of the same refine and P; most sent: values a rank sends per interface sum (each shared "
        "unknown once per peer holding it); neighbours: ranks sharing an unknown with it.\n\n" + text + "\n",
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = ArgumentParser(prog="python scripts/partition_quality.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--refine", type=int, nargs="+", default=[0, 1, 2], help="refinements of the coarse mesh (default 0 1 2)"
    )
    ap.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8, 16], help="numbers of ranks (default 2 4 8 16)")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument(
        "--tag", default="cpu", help="results name: benchmarks/results/partition_quality_<tag>.{json,md} (default cpu)"
    )
    args = ap.parse_args(argv)
    levels = sorted(set(check_each("--refine", args.refine, low=0, high=3, integer=True)))
    counts = sorted(set(check_each("--parts", args.parts, low=2, high=4096, integer=True)))
    tag = check_tag(args.tag)
    from importlib.metadata import PackageNotFoundError, version
    from fem3d.discretisation.mesh import read_mesh
    from fem3d.discretisation.refine import refine
    from fem3d.parallel.partition import graph_parts, partition_elements
    from fem3d.problems.case import read_case

    try:
        metis_version = version("pymetis")
    except PackageNotFoundError:
        raise InputError("needs pymetis: pip install -e .[mpi]") from None
    case = read_case(CASE)
    meshes = {0: read_mesh(case.mesh_file, case.tag_field)}
    for k in range(1, max(levels) + 1):
        meshes[k] = refine(meshes[k - 1], 1)
    command = " ".join(["python scripts/partition_quality.py", *argv])
    rows = []
    for k in levels:
        mesh = meshes[k]
        for p in counts:
            found = {}
            for name in ("fem3d", "rcb", "metis-fine") if k > 0 else ("fem3d", "rcb"):
                t0 = time.perf_counter()
                if name == "fem3d":
                    part = partition_elements(mesh, p)
                elif name == "rcb":
                    part = follow_parents(mesh, coordinate_bisection(meshes[0], p))
                else:
                    part = graph_parts(mesh, p)
                found[name] = {
                    "refine": k,
                    "elements": mesh.n_elements,
                    "unknowns": mesh.n_dofs,
                    "parts": p,
                    "partitioner": name,
                    "partition_s": time.perf_counter() - t0,
                    **quality(mesh, part, p),
                }
            for r in found.values():
                r["interface_max_vs_fem3d"] = r["interface_max"] / found["fem3d"]["interface_max"]
            rows += found.values()
            print(
                f"refine {k}, {p} ranks: "
                + ", ".join(
                    f"{n} {r['interface_max']:,} shared (imbalance {r['imbalance']:.3f})" for n, r in found.items()
                ),
                flush=True,
            )
    print(table(rows))
    os.makedirs(args.results, exist_ok=True)
    base = os.path.join(args.results, f"partition_quality_{tag}")
    save(base, command, metis_version, rows)
    print(f"wrote {base}.json, {base}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="partition_quality"))
