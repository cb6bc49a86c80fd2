"""What a cavity run leaves in its output folder, results first and pictures last.

:class:`CavityReport` holds a finished run (fem3d.problems.result.FlowResult) and what the
cavity derives from it: the centre-line profiles and their comparison with the published
ones. :func:`write_results` writes solution.npy, the VTU (or the pieces and the PVTU
joining them), profiles.csv and summary.json, each atomically, so that a later failure
loses none of them; :func:`write_pictures` then draws profiles.png and slice.png, each in a
child process (fem3d.commands.picture_process), and turns a picture that fails into a
warning. summary.json lists the files on disk when it is written; :func:`write_summary`
rewrites it once the pictures are there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from . import plots
from ..problems.distributed import partition_line
from ..discretisation.fields import mid_plane
from ..discretisation.output import write_profiles_csv
from ..problems.result import FlowResult
from .picture_process import PictureError, draw_in_child
from .time_output import strouhal_line
from . import resolution
from ..problems.references import cavity_references, centre_line_profiles, compare_with_references


PICTURES = ("profiles.png", "slice.png")


@dataclass
class CavityReport:
    """A finished cavity run as the writers need it: ``result`` (its ``mesh_info`` says how
    the mesh was made: {"box": [nx, ny, nz], "grading": g} or {"file": path}), the output
    folder ``out``, the command line and whether to write the VTU. Every rank holds one;
    the profiles derived from the whole solution are rank 0's alone."""

    result: FlowResult
    out: str
    command: str  # "python -m fem3d.cavity ..."
    vtu: bool = True

    @property
    def re(self) -> float:
        return self.result.flow.re

    @property
    def mesh(self):
        return self.result.flow.mesh

    @cached_property
    def references(self) -> list:
        """Published profiles at this Reynolds number (fem3d.problems.references)."""
        return cavity_references(self.re)

    @cached_property
    def profiles(self) -> dict:
        """The centre-line profiles of ``x`` (rank 0)."""
        return centre_line_profiles(self.mesh, self.result.x, self.references)

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
        box = self.result.mesh_info.get("box")
        cube = box is not None and len(set(box)) == 1 and self.result.mesh_info["grading"] == resolution.GRADING
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


def write_results(run: CavityReport) -> list[str]:
    """solution.npy, cavity.vtu (cavity_<rank>.vtu pieces and cavity.pvtu on several ranks;
    none with ``run.vtu`` false), profiles.csv and summary.json, in that order, each
    atomically. Every rank calls it; returns the files written (rank 0; [] elsewhere)."""
    files = run.result.write_solution(run.out, run.vtu, "cavity")
    if run.result.comm.rank:
        return []
    write_profiles_csv(os.path.join(run.out, "profiles.csv"), run.profiles)
    files += ["profiles.csv", "summary.json"]
    write_summary(run, files)
    return files


def write_pictures(run: CavityReport, warn, stop=lambda: False) -> list[str]:
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
            {"plane": mid_plane(run.mesh, run.result.x), "title": f"3D lid-driven cavity, Re {run.re:g}"},
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


def write_summary(run: CavityReport, files: list[str], warnings: list[str] = ()) -> dict:
    """summary.json (atomically): the run's (fem3d.problems.result.FlowResult.summary), the
    comparison with the published profiles, ``files`` and ``warnings``; returns its content."""
    extra = {"validation": run.comparison, "accuracy": run.accuracy, "warnings": list(warnings), "command": run.command}
    return run.result.write_summary(run.out, files, extra)


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


def final_lines(run: CavityReport, summary: dict) -> list[str]:
    """The lines that end a run's progress report: differences from the references (of the
    last state, in time), the time reached, T_unit, and the files written."""
    lines = [
        f"{row['profile']:>13} vs {row['reference']}: max |diff| {row['max_abs_diff']:.4f} at {row['at']:.4f}"
        for row in summary["validation"]
    ]
    lines.append(accuracy_line(summary["accuracy"], run.re))
    t = summary.get("time")
    if t is not None:
        lines.append(
            f"{'reached' if summary['converged'] else 'NOT reached (' + summary['reason'] + ')'} t = {t['t']:.6g} in "
            f"{t['steps']} steps of {t['scheme']}, {t['seconds_per_step']:.3g} s per step: the profiles above are the "
            "state at that time (the published ones are steady flows')"
        )
        lines += strouhal_line(t)
    lines.append(
        f"T_unit {summary['t_unit_us']:.1f} us ({summary['nonlinear_steps']} nonlinear steps, "
        f"{summary['linear_iterations']} linear iterations, T_run {summary['t_run_s']:.1f} s of "
        f"{summary['wall_s']:.1f} s wall)"
    )
    if summary["partition"]:
        lines.append(partition_line(summary["partition"]))
    lines.append(f"wrote {run.out}/: {', '.join(summary['files'])}")
    return lines
