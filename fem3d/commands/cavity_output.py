"""What a cavity run leaves in its output folder, results first and pictures last.

:class:`CavityRun` records a finished run. :func:`write_results` writes solution.npy,
the VTU (or the pieces and the PVTU joining them), profiles.csv and summary.json, each
atomically, so that a later failure loses none of them; :func:`write_pictures` then
draws profiles.png and slice.png, each in a child process (fem3d.commands.picture_process), and
turns a picture that fails into a warning. summary.json lists the files on disk when it
is written; :func:`write_summary` rewrites it once the pictures are there.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import plots
from ..problems.distributed import partition_balance, partition_line, write_solution_vtu
from ..discretisation.fields import mid_plane
from ..discretisation.mesh import HexMesh
from gpucfd.output import save_npy, write_json
from ..discretisation.output import write_profiles_csv
from ..parallel.partition import Partition
from .picture_process import PictureError, draw_in_child
from . import resolution
from ..problems.navier_stokes import run_timing
from ..problems.references import cavity_references, centre_line_profiles, compare_with_references


@dataclass
class CavityRun:
    """A finished cavity run as the writers need it. Every rank holds one; ``x``,
    ``per_rank`` and the profiles derived from ``x`` are rank 0's alone."""

    command: str  # the command line, "python -m fem3d.cavity ..."
    out: str  # the output folder
    re: float
    mesh: HexMesh  # the whole mesh
    mesh_info: dict  # how it was made: {"box": [nx, ny, nz], "grading": g} or {"file": path}
    part: Partition  # this rank's part of the mesh
    x_local: np.ndarray  # this rank's solution on ``part`` (host)
    x: np.ndarray | None  # the global solution [u | v | w | p] (host; None except on rank 0)
    comm: object  # the communicator (rank, size, name)
    device: str  # the backend, as backend.describe() gives it
    history: (
        list  # per Reynolds number solved: re, converged, reason, residual, steps (fem3d.solvers.nonlinear.Step fields)
    )
    options: dict  # nonlinear and linear solver options
    times_s: dict  # seconds per phase (NavierStokesSystem.phase_seconds): data_preparation, element_matrices, linear_setup, solve
    output_started: float  # time.perf_counter() when the output began (after the last phase)
    per_rank: list | None  # fem3d.problems.distributed.rank_report (rank 0; None elsewhere)
    converged: bool
    reason: str  # converged, max_steps, nan, diverged, stagnated, linear_solver, interrupted (...)
    vtu: bool = True  # write the VTU (or PVTU) solution
    sequence: list = field(
        default_factory=list
    )  # mesh sequencing: per coarser mesh solved first, coarsest first (fem3d.cavity.solve_coarser_first)

    @cached_property
    def references(self) -> list:
        """Published profiles at this Reynolds number (fem3d.problems.references)."""
        return cavity_references(self.re)

    @cached_property
    def profiles(self) -> dict:
        """The centre-line profiles of ``x`` (rank 0)."""
        return centre_line_profiles(self.mesh, self.x, self.references)

    @cached_property
    def comparison(self) -> list:
        """max |difference| from each reference set (rank 0)."""
        return compare_with_references(self.profiles, self.references)

    @property
    def accuracy(self) -> dict:
        """The largest difference from the published profiles (None without data at this Re),
        the one expected for a graded cube of this size (fem3d.commands.resolution; None for other
        meshes) and whether the profiles are resolved (within resolution.TARGET; None when
        neither tells)."""
        largest = max(self.comparison, key=lambda row: row["max_abs_diff"], default=None)
        box = self.mesh_info.get("box")
        cube = box is not None and len(set(box)) == 1 and self.mesh_info["grading"] == resolution.GRADING
        expected = resolution.expected_deviation(self.re, box[0]) if cube else None
        measure = largest["max_abs_diff"] if largest else expected
        return {
            "largest_deviation": None
            if largest is None
            else {k: largest[k] for k in ("max_abs_diff", "profile", "reference", "citation")},
            "expected_deviation": expected,
            "target": resolution.TARGET,
            "resolved": None if measure is None else bool(measure <= resolution.TARGET),
        }


def write_results(run: CavityRun) -> list[str]:
    """solution.npy, cavity.vtu (cavity_<rank>.vtu pieces and cavity.pvtu on several ranks;
    none with ``run.vtu`` false), profiles.csv and summary.json, in that order, each
    atomically. Every rank calls it; returns the files written (rank 0; [] elsewhere)."""
    root = run.comm.rank == 0
    files = []
    if root:
        save_npy(os.path.join(run.out, "solution.npy"), run.x)
        files.append("solution.npy")
    if run.vtu:
        files.append(write_solution_vtu(run.out, "cavity", run.part, run.x_local, run.comm))
    if not root:
        return []
    write_profiles_csv(os.path.join(run.out, "profiles.csv"), run.profiles)
    files += ["profiles.csv", "summary.json"]
    write_summary(run, files)
    return files


def write_pictures(run: CavityRun, warn, stop=lambda: False) -> list[str]:
    """profiles.png and slice.png (rank 0), each drawn in a child process; a picture that
    cannot be made becomes ``warn("NAME not written (why)")`` and the next is tried; once
    ``stop()`` is true (a stop signal) no further picture is started. Returns the pictures
    written."""
    pictures = {
        "profiles.png": lambda: (
            plots.profiles_png,
            {"profiles": run.profiles, "references": run.references, "re": run.re},
        ),
        "slice.png": lambda: (
            plots.slice_png,
            {"plane": mid_plane(run.mesh, run.x), "title": f"3D lid-driven cavity, Re {run.re:g}"},
        ),
    }
    written = []
    for name, job in pictures.items():
        if stop():
            break
        try:
            draw, data = job()
            draw_in_child(draw, os.path.join(run.out, name), **data)
        except Exception as exc:  # a picture is never worth the run: its results are already on disk
            warn(f"{name} not written ({exc if isinstance(exc, PictureError) else f'{type(exc).__name__}: {exc}'})")
        else:
            written.append(name)
    return written


def write_summary(run: CavityRun, files: list[str], warnings: list[str] = ()) -> dict:
    """summary.json (atomically) listing ``files`` and ``warnings``; returns its content."""
    steps = [s for stage in run.history for s in stage["steps"]]
    times = {**run.times_s, "output": time.perf_counter() - run.output_started}
    timing = run_timing(run.times_s, len(steps), run.mesh.n_elements)
    summary = {
        "re": run.re,
        "converged": run.converged,
        "reason": run.reason,
        "mesh": {
            **run.mesh_info,
            "elements": run.mesh.n_elements,
            "velocity_nodes": run.mesh.n_nodes,
            "pressure_nodes": run.mesh.n_pressure,
            "colours": run.mesh.n_colours,
        },
        "dofs": run.mesh.n_dofs,
        "device": run.device,
        "ranks": run.comm.size,
        "communicator": run.comm.name,
        "residual": run.history[-1]["residual"] if run.history else None,
        "nonlinear_steps": len(steps),
        "newton_steps": sum(s["kind"] == "newton" for s in steps),
        "linear_iterations": sum(s["linear_iterations"] for s in steps),
        "continuation": run.history,
        "sequence": run.sequence,
        "times_s": times,
        **timing,
        "per_rank": run.per_rank,
        "partition": partition_balance(run.per_rank),
        "options": run.options,
        "validation": run.comparison,
        "accuracy": run.accuracy,
        "files": list(files),
        "warnings": list(warnings),
        "command": run.command,
    }
    write_json(os.path.join(run.out, "summary.json"), summary)
    return summary


def accuracy_line(accuracy: dict, re: float) -> str:
    """One line: the largest deviation from the published profiles and whether that resolves
    the flow, or what is expected where no data exist."""
    target, largest, expected = accuracy["target"], accuracy["largest_deviation"], accuracy["expected_deviation"]
    if largest is not None:
        verdict = "resolved" if accuracy["resolved"] else f"not resolved: more than {target:g}"
        return (
            f"largest deviation from the published profiles: {largest['max_abs_diff']:.4f} ({largest['profile']} vs "
            f"{largest['citation']}), {verdict}"
        )
    if expected is not None:
        return (
            f"no published profiles at Re {re:g}; this mesh is expected within {expected:.4f} of them "
            f"({'resolved' if accuracy['resolved'] else f'not resolved: more than {target:g}'})"
        )
    return f"no published profiles at Re {re:g} and no measured accuracy for this mesh: resolution unknown"


def final_lines(run: CavityRun, summary: dict) -> list[str]:
    """The lines that end a run's progress report: differences from the references,
    T_unit, and the files written."""
    lines = [
        f"{row['profile']:>13} vs {row['reference']}: max |diff| {row['max_abs_diff']:.4f} at {row['at']:.4f}"
        for row in summary["validation"]
    ]
    lines.append(accuracy_line(summary["accuracy"], run.re))
    lines.append(
        f"T_unit {summary['t_unit_us']:.1f} us ({summary['nonlinear_steps']} nonlinear steps, "
        f"{summary['linear_iterations']} linear iterations, T_run {summary['t_run_s']:.1f} s of {summary['wall_s']:.1f} s "
        "wall)"
    )
    if summary["partition"]:
        lines.append(partition_line(summary["partition"]))
    lines.append(f"wrote {run.out}/: {', '.join(summary['files'])}")
    return lines
