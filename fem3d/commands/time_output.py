"""What a front end writes while a run steps in time (``fem3d.run`` with [time], ``fem3d.cavity
--t-end``): history.csv row by row (fem3d.problems.history), checkpoint.npz every so many
steps and when stopped (fem3d.problems.checkpoint), VTU snapshots with their PVD collection,
and at the end the series' extrema and periods in summary.json and history.png.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from . import plots
from .picture_process import PictureError, draw_in_child
from ..discretisation.output import write_pvd
from ..problems.checkpoint import NAME as CHECKPOINT
from ..problems.checkpoint import is_checkpoint, read_checkpoint, write_checkpoint
from ..problems.distributed import write_solution_vtu
from ..problems.history import STEP_COLUMNS, History
from gpucfd.errors import ConvergenceError, InputError

HISTORY, PVD, PICTURE = "history.csv", "flow.pvd", "history.png"
FILES = [HISTORY, CHECKPOINT, PVD, "snapshot_*.vtu", "snapshot_*.pvtu"]  # an earlier run's, stale unless continued


def resume_from(initial: str | None, mesh, time, table: str):
    """The TimeState of the checkpoint ``initial`` (an .npz) for a run on ``mesh`` with the TimeOptions ``time``
    (None: steady, where a checkpoint is an InputError naming ``table``, how the time is given),
    or None where ``initial`` is no checkpoint."""
    if not initial or not is_checkpoint(initial):
        return None
    if time is None:
        raise InputError(f"--initial {initial}: a checkpoint continues a run in time; give {table}")
    return read_checkpoint(initial, mesh, time)


class TimeOutput:
    """The files of a run in time on ``mesh`` (whole) in the folder ``out`` (claimed by the
    caller), on rank ``comm.rank`` (files on rank 0, the VTU pieces on every rank). ``measure(state)`` -> the
    quantities of a step's state (a FlowResult; collective, the same on every rank); ``resume``:
    the TimeState a continued run starts from (its history's first rows and snapshots kept)."""

    def __init__(self, out: str, mesh, time, comm, measure, resume=None):
        self.out, self.mesh, self.time, self.comm, self.measure = out, mesh, time, comm, measure
        self.root = comm.rank == 0
        kept = resume.step if resume else 0
        self.history = History(os.path.join(out, HISTORY) if self.root else None, kept)
        self.snapshots = self._kept_snapshots(kept) if self.root else []
        self.last = {}

    def on_step(self, step, state) -> None:
        """After each step (Simulation.run's on_step): its row, and a snapshot when due."""
        self.last = self.measure(state)
        self.history.add(step, self.last)
        every = self.time.snapshot_every
        if every and step.step % every == 0:
            name = write_solution_vtu(self.out, f"snapshot_{step.step:06d}", state.part, state.x_local, self.comm)
            self.snapshots.append((step.t, name))
            if self.root:
                write_pvd(os.path.join(self.out, PVD), self.snapshots)

    def on_checkpoint(self, state) -> None:
        """Simulation.run's on_checkpoint: checkpoint.npz (rank 0)."""
        if self.root:
            write_checkpoint(os.path.join(self.out, CHECKPOINT), state, self.time, self.mesh)

    def close(self) -> None:
        self.history.close()

    def finish(self, result, strouhal: dict | None = None) -> None:
        """The last step's quantities as the result's, and summary.json's time record: the
        series' extrema, periods and spectral peaks, and with ``strouhal`` {"of", "length",
        "velocity"} the Strouhal number f L / U of that column (where it is periodic) and of
        its spectral peak ("peak", also where it is not)."""
        result.quantities = self.last
        result.time["series"] = self.history.extrema()
        result.time["periodic"] = self.history.periodic()
        result.time["spectrum"] = self.history.spectra()
        if strouhal:
            scale = strouhal["length"] / strouhal["velocity"]
            found = result.time["periodic"].get(strouhal["of"])
            peak = result.time["spectrum"].get(strouhal["of"])
            result.time["strouhal"] = {
                "of": strouhal["of"],
                "value": None if found is None else found["frequency"] * scale,
                "period": found and found["period"],
                "peak": None if peak is None else peak["frequency"] * scale,
            }

    def files(self) -> list[str]:
        """The files of the run in time on disk (rank 0)."""
        return [f for f in (HISTORY, CHECKPOINT, PVD) if os.path.isfile(os.path.join(self.out, f))]

    def picture(self, files: list, title: str, prog: str) -> None:
        """history.png, the reported quantities against t, in a child process (rank 0); a failure
        is a warning naming ``prog``."""
        h = self.history
        quantities = [] if not h.rows else h.columns[len(STEP_COLUMNS) :]
        if not quantities:
            return
        try:
            draw_in_child(
                plots.history_png,
                os.path.join(self.out, PICTURE),
                t=np.array(h.column("t")),
                series={c: np.array(h.column(c)) for c in quantities},
                title=title,
            )
        except Exception as exc:  # a picture is never worth the run: its results are already on disk
            reason = exc if isinstance(exc, PictureError) else f"{type(exc).__name__}: {exc}"
            print(f"{prog}: warning: {PICTURE} not written ({reason})", file=sys.stderr, flush=True)
        else:
            files.append(PICTURE)

    def _kept_snapshots(self, kept: int) -> list:
        """[(t, file)] of the snapshots of the ``kept`` steps a continued run keeps (the PVD's
        entries so far): those on disk among every ``snapshot_every``-th step of the history."""
        every, rows = self.time.snapshot_every, self.history.rows
        out = []
        for k in range(every, min(kept, len(rows)) + 1, every) if every else ():
            for name in (f"snapshot_{k:06d}.vtu", f"snapshot_{k:06d}.pvtu"):
                if os.path.isfile(os.path.join(self.out, name)):
                    out.append((rows[k - 1][0], name))
        return out


class StepBar:
    """The progress of a run in time on a terminal: the last step's line (TimeStep.line) after a
    bar of the time done, redrawn in place; other lines (``say``) print above it."""

    WIDTH = 24

    def __init__(self, t_end: float, stream=None):
        self.t_end, self.stream, self.drawn = t_end, stream or sys.stdout, ""

    def status(self, step, fraction: float, eta_s: float | None) -> None:
        """Simulation.run's ``status``: the bar and the step's line."""
        filled = int(round(self.WIDTH * min(max(fraction, 0.0), 1.0)))
        self.drawn = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {step.line(self.t_end, eta_s)}"
        self.stream.write("\r\x1b[K" + self.drawn)
        self.stream.flush()

    def say(self, line: str) -> None:
        """A line above the bar."""
        self.stream.write(("\r\x1b[K" if self.drawn else "") + line + "\n" + self.drawn)
        self.stream.flush()

    def close(self) -> None:
        """The bar's last state stays on its line."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = ""


def time_exit(prog: str, result, signum: int, out: str, root: bool, smaller: str) -> int:
    """The exit of a run in time: 128 + signal after a stop, ConvergenceError (exit 3) for a step
    that did not converge (``smaller``: how the step is made smaller, e.g. "[time] dt"), both
    naming the checkpoint that continues it, or for a steady start that did not; else 0."""
    t, checkpoint = result.time["t"], os.path.join(out, CHECKPOINT)
    if signum:
        if root:
            print(
                f"{prog}: interrupted by {signal.Signals(signum).name} at t = {t:.6g}; the state and its history are "
                f"in {out}: continue with --initial {checkpoint}",
                file=sys.stderr,
                flush=True,
            )
        return 128 + signum
    if result.reason.startswith("steady start"):
        raise ConvergenceError(
            "the steady flow at t = 0 did not converge: start from rest instead, or from an initial state (--initial)",
            result.reason,
        )
    if not result.converged:
        raise ConvergenceError(
            f"the step from t = {t:.6g} did not converge ({result.reason}); the state at that time ({checkpoint}) and "
            f"the history up to it are in {out}: take a smaller {smaller}",
            result.reason,
        )
    return 0


def strouhal_line(time: dict) -> list[str]:
    """The line of summary.json's ``time`` record that gives its Strouhal number (or says
    that its column is not periodic), none where the run asked for none."""
    st = time.get("strouhal")
    if not st:
        return []
    if st["value"] is None:
        peak = "" if st["peak"] is None else f"; its spectrum peaks at f L / U = {st['peak']:.4g} over the last half"
        return [f"{st['of']} is not periodic at the end: no Strouhal number{peak}"]
    return [f"Strouhal number {st['value']:.6g} (period {st['period']:.6g} of {st['of']})"]
