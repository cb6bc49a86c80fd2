"""Checkpoints of a run in time: checkpoint.npz holds the whole TimeState after a step
(fem3d.solvers.time_stepping), from which a run continues (``fem3d.run --initial``) with the
same steps, bit for bit, as a run never stopped.

Arrays: ``step`` (steps done), ``t`` (the time reached), ``x``, ``previous`` and ``sample``
(whole vectors [u | v | w | p]; empty where the state has none), ``dt_previous`` and
``sample_t`` (NaN where none), and the settings it was made with: ``dt``, ``scheme``.
"""

from __future__ import annotations

import math

import numpy as np

from gpucfd.errors import InputError
from gpucfd.output import atomic_path
from ..solvers.time_stepping import TimeOptions, TimeState

NAME = "checkpoint.npz"


def write_checkpoint(path: str, state: TimeState, options: TimeOptions) -> None:
    """``state`` (whole host vectors) of a run with ``options``, atomically."""
    empty = np.zeros(0)
    arrays = dict(
        step=np.int64(state.step),
        t=np.float64(options.times()[state.step]),
        x=np.asarray(state.x, dtype=np.float64),
        previous=empty if state.previous is None else np.asarray(state.previous, dtype=np.float64),
        dt_previous=np.float64(math.nan if state.dt_previous is None else state.dt_previous),
        sample=empty if state.sample is None else np.asarray(state.sample[0], dtype=np.float64),
        sample_t=np.float64(math.nan if state.sample is None else state.sample[1]),
        dt=np.float64(options.dt),
        scheme=np.str_(options.scheme),
    )
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def read_checkpoint(path: str, n_dofs: int, options: TimeOptions, option: str = "--initial") -> TimeState:
    """The TimeState in the checkpoint ``path`` for a mesh of ``n_dofs`` unknowns, continued
    with ``options``; InputError (naming ``option``) for a file that is no checkpoint, of
    another mesh, made with another dt or scheme (its steps would not be this run's), or at
    or past t_end."""
    try:
        with np.load(path, allow_pickle=False) as data:
            fields = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{option} {path}: cannot read a checkpoint ({exc})") from None
    need = {"step", "t", "x", "previous", "dt_previous", "sample", "sample_t", "dt", "scheme"}
    if not need <= set(fields):
        raise InputError(f"{option} {path}: not a checkpoint of fem3d.run (it lacks {sorted(need - set(fields))})")
    x, previous, sample = fields["x"], fields["previous"], fields["sample"]
    for name, v in (("x", x), ("previous", previous), ("sample", sample)):
        if v.dtype != np.float64 or v.ndim != 1 or v.size not in ((n_dofs,) if name == "x" else (0, n_dofs)):
            raise InputError(f"{option} {path}: its state is not one of this mesh's {n_dofs} unknowns")
        if not np.isfinite(v).all():
            raise InputError(f"{option} {path}: its state holds NaN or infinite values")
    step, t = int(fields["step"]), float(fields["t"])
    if str(fields["scheme"]) != options.scheme or float(fields["dt"]) != options.dt:
        raise InputError(
            f"{option} {path}: made with dt {float(fields['dt']):g} and scheme {fields['scheme']}; continue it with "
            f"the same ([time] dt = {options.dt:g}, scheme = {options.scheme} now)"
        )
    times = options.times()
    if not 0 < step < len(times) - 1 or times[step] != t:
        raise InputError(f"{option} {path}: it stands at t = {t:g}, not before [time] t_end = {options.t_end:g}")
    return TimeState(
        step,
        x,
        previous if previous.size else None,
        None if math.isnan(float(fields["dt_previous"])) else float(fields["dt_previous"]),
        (sample, float(fields["sample_t"])) if sample.size else None,
    )


def is_checkpoint(path: str) -> bool:
    """``path`` names a checkpoint (an .npz file) rather than a solution (.npy)."""
    return path.endswith(".npz")
