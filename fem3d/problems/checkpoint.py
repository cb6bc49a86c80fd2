"""Checkpoints of a run in time: checkpoint.npz holds the whole TimeState after a step
(fem3d.solvers.time_stepping), from which a run continues (``fem3d.run --initial``) with the
same steps, bit for bit, as a run never stopped.

Arrays: ``step`` (steps done), ``t`` (the time reached), ``x``, ``previous``, ``older`` and
``sample`` (whole vectors [u | v | w | p]; empty where the state has none), ``dt_previous``,
``dt_older``, ``dt_next`` and ``sample_t`` (NaN where none), the settings it was made
with: ``dt``, ``scheme``, ``tolerance`` (NaN for fixed steps), ``dt_min``, ``dt_max`` (the
bounds in force), and ``nodes_at``: the coordinates (k, 3) of NODE_SAMPLE nodes spread over
the numbering, so that a state of another mesh, or of another numbering of it, with as many
unknowns is refused.
"""

from __future__ import annotations

import math

import numpy as np

from gpucfd.errors import InputError
from gpucfd.output import atomic_path
from gpucfd.sets import distinct
from ..solvers.time_stepping import TimeOptions, TimeState

NAME = "checkpoint.npz"
VECTORS = ("x", "previous", "older", "sample")
NODE_SAMPLE = 32  # nodes whose coordinates a checkpoint keeps
NUMBERS = ("dt_previous", "dt_older", "dt_next", "sample_t")


def _settings(options: TimeOptions) -> dict:
    """The settings a checkpoint's steps depend on, as stored."""
    adaptive, nan = options.adaptive, math.nan
    return dict(
        dt=np.float64(options.dt),
        scheme=np.str_(options.scheme),
        tolerance=np.float64(options.tolerance if adaptive else nan),
        dt_min=np.float64(options.dt_smallest if adaptive else nan),
        dt_max=np.float64(options.dt_largest if adaptive else nan),
    )


def _nodes_at(mesh) -> np.ndarray:
    """(k, 3) the coordinates of NODE_SAMPLE Q2 nodes of ``mesh`` spread evenly over its numbering."""
    return mesh.points_of(distinct(np.linspace(0, mesh.n_nodes - 1, NODE_SAMPLE).round().astype(np.int64)))


def write_checkpoint(path: str, state: TimeState, options: TimeOptions, mesh) -> None:
    """``state`` (whole host vectors) of a run with ``options`` on ``mesh`` (whole), atomically."""
    vectors = state.vectors()
    numbers = dict(
        dt_previous=state.dt_previous,
        dt_older=state.dt_older,
        dt_next=state.dt_next,
        sample_t=None if state.sample is None else state.sample[1],
    )
    arrays = dict(
        step=np.int64(state.step),
        t=np.float64(state.t),
        **{k: np.zeros(0) if v is None else np.asarray(v, dtype=np.float64) for k, v in vectors.items()},
        **{k: np.float64(math.nan if v is None else v) for k, v in numbers.items()},
        **_settings(options),
        nodes_at=_nodes_at(mesh),
    )
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def read_checkpoint(path: str, mesh, options: TimeOptions, option: str = "--initial") -> TimeState:
    """The TimeState in the checkpoint ``path`` for ``mesh`` (whole), continued with
    ``options``; InputError (naming ``option``) for a file that is no checkpoint, of another
    mesh or numbering (its sampled nodes elsewhere; a refined mesh's checkpoint without them
    comes from an earlier fem3d, which numbered refined meshes otherwise), made with other
    step settings (its steps would not be this run's), or at or past t_end."""
    n_dofs = mesh.n_dofs
    try:
        with np.load(path, allow_pickle=False) as data:
            fields = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{option} {path}: cannot read a checkpoint ({exc})") from None
    now = _settings(options)
    need = {"step", "t", *VECTORS, *NUMBERS, *now}
    if not need <= set(fields):
        raise InputError(f"{option} {path}: not a checkpoint of fem3d.run (it lacks {sorted(need - set(fields))})")
    vectors = {k: fields[k] for k in VECTORS}
    for name, v in vectors.items():
        if v.dtype != np.float64 or v.ndim != 1 or v.size not in ((n_dofs,) if name == "x" else (0, n_dofs)):
            raise InputError(f"{option} {path}: its state is not one of this mesh's {n_dofs} unknowns")
        if not np.isfinite(v).all():
            raise InputError(f"{option} {path}: its state holds NaN or infinite values")
    if "nodes_at" in fields:
        here, there = _nodes_at(mesh), fields["nodes_at"]
        if there.shape != here.shape or not np.allclose(there, here, rtol=1e-12, atol=1e-12 * np.abs(here).max()):
            raise InputError(f"{option} {path}: its nodes are not where this mesh's are (another mesh, or numbering)")
    elif mesh.coarser is not None:
        raise InputError(
            f"{option} {path}: made by an earlier fem3d, which numbered a refined mesh's nodes otherwise: "
            "start the run again"
        )
    differ = [k for k in now if not _same(fields[k], now[k])]
    if differ:
        was = ", ".join(f"{k} {_shown(fields[k])}" for k in differ)
        want = ", ".join(f"{k} = {_shown(now[k])}" for k in differ)
        raise InputError(f"{option} {path}: made with {was}; continue it with the same ([time] {want} now)")
    step, t = int(fields["step"]), float(fields["t"])
    times = None if options.adaptive else options.times()
    if not (0 < t < options.t_end if times is None else 0 < step < len(times) - 1 and times[step] == t):
        raise InputError(f"{option} {path}: it stands at t = {t:g}, not before [time] t_end = {options.t_end:g}")
    number = {k: None if math.isnan(float(fields[k])) else float(fields[k]) for k in NUMBERS}
    present = {k: v if v.size else None for k, v in vectors.items()}
    return TimeState(
        step,
        t,
        present["x"],
        present["previous"],
        number["dt_previous"],
        None if present["sample"] is None else (present["sample"], number["sample_t"]),
        present["older"],
        number["dt_older"],
        number["dt_next"],
    )


def _same(a, b) -> bool:
    """Stored settings ``a`` and ``b`` agree (NaN agrees with NaN: both fixed steps)."""
    if np.asarray(a).dtype.kind in "US":
        return str(a) == str(b)
    a, b = float(a), float(b)
    return a == b or (math.isnan(a) and math.isnan(b))


def _shown(v) -> str:
    if np.asarray(v).dtype.kind in "US":
        return str(v)
    v = float(v)
    return "none" if math.isnan(v) else f"{v:g}"


def is_checkpoint(path: str) -> bool:
    """``path`` names a checkpoint (an .npz file) rather than a solution (.npy)."""
    return path.endswith(".npz")
