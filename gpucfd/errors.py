"""User-facing errors and the command-line wrapper shared by every entry point.

Exit codes: 0 success, 2 bad input (parameter out of range, missing file, no GPU
when one was asked for), 3 a run that did not converge (iteration cap, divergence,
NaN). The message is always one line; no traceback reaches the user for these.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
import sys
import warnings

EXIT_INPUT = 2
EXIT_NOT_CONVERGED = 3


class InputError(ValueError):
    """Bad user input. The message names the parameter and the allowed values."""


class ConvergenceError(RuntimeError):
    """A solve stopped without converging; ``reason`` says why."""

    def __init__(self, message: str, reason: str = "not converged"):
        super().__init__(message)
        self.reason = reason


RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MPI_LOCALRANKID")


def launcher_rank() -> int:
    """This process's rank as the MPI launcher's environment gives it (Open MPI, MPICH/Hydra,
    PMIx, Slurm, Intel MPI's node-local id last); 0 outside a launcher. Read without mpi4py,
    so that argument errors are printed once before MPI starts."""
    for var in RANK_VARIABLES:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump) and exit code 2; under an MPI launcher
    only rank 0 prints the error or the help, every rank exits alike."""

    def error(self, message: str):  # noqa: D401 - argparse API
        prog = self.prog.removeprefix("python -m ")  # as run_cli names the command
        self.exit(EXIT_INPUT, f"{prog}: error: {message}\n" if launcher_rank() == 0 else None)

    def print_help(self, file=None):
        if launcher_rank() == 0:
            super().print_help(file)


_COMMUNICATORS = []  # the communicator of this process once one was made (set_communicator)


def set_communicator(comm) -> None:
    """Record the communicator (size, rank, abort()) of a run on several ranks, so that an
    error on one rank stops all of them (:func:`run_cli`)."""
    _COMMUNICATORS.append(comm)


def communicator():
    """The communicator recorded by :func:`set_communicator` (None before)."""
    return _COMMUNICATORS[-1] if _COMMUNICATORS else None


def run_cli(main, argv=None, prog: str | None = None) -> int:
    """Run ``main(argv)``; turn InputError/ConvergenceError into a one-line message and exit code.

    Warnings raised while ``main`` runs (NumPy overflow and the like) are held back: after
    an InputError or ConvergenceError the one line says what went wrong and they are
    dropped; otherwise they are shown at the end. A MemoryError (NumPy or CuPy) of a
    single process is a one-line input error too (the problem does not fit).

    Under MPI those two are raised on every rank alike (e.g. fem3d.parallel.comm.agreed_errors; the
    convergence tests use global norms), so rank 0 alone prints and every rank returns
    the code. Any other exception on one rank would leave the others waiting in a
    collective: the failing rank prints one line naming itself and aborts the job.
    """
    prog = prog or main.__module__
    with warnings.catch_warnings(record=True) as held:
        try:
            code = main(argv) or 0
        except InputError as exc:
            _say_once(f"{prog}: error: {exc}")
            return EXIT_INPUT
        except ConvergenceError as exc:
            _say_once(f"{prog}: not converged ({exc.reason}): {exc}")
            return EXIT_NOT_CONVERGED
        except Exception as exc:
            comm = communicator()
            if isinstance(exc, MemoryError) and (comm is None or comm.size == 1):
                print(
                    f"{prog}: error: out of memory ({type(exc).__name__}: {' '.join(str(exc).split())}); "
                    "use a smaller problem",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_INPUT
            _show(held)
            if comm is None or comm.size == 1:
                raise
            print(
                f"{prog}: rank {comm.rank} of {comm.size} failed: {type(exc).__name__}: {exc}; aborting all ranks",
                file=sys.stderr,
                flush=True,
            )
            comm.abort(1)
            raise
    _show(held)
    return code


def _show(held) -> None:
    """Print the warnings ``held`` back by run_cli, as Python would have."""
    for w in held:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def _say_once(message: str) -> None:
    """Print ``message`` to stderr on rank 0: of the communicator, or before one is made (or in a
    command that makes none) of the MPI launcher."""
    comm = communicator()
    if (launcher_rank() if comm is None else comm.rank) == 0:
        print(message, file=sys.stderr, flush=True)


SHOWN = 40  # characters of a value that a message shows


def cut(text: str, limit: int = SHOWN) -> str:
    """``text`` for a one-line message: cut after ``limit`` characters, its length said."""
    return text if len(text) <= limit else f"{text[: limit - 5]}... ({len(text)} characters)"


def shown(value, limit: int = SHOWN) -> str:
    """repr(value) for a one-line message, :func:`cut` to ``limit`` characters."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # a NumPy scalar: as the number it holds
        value = value.item()
    try:
        return cut(repr(value), limit)
    except ValueError:  # an integer beyond Python's digit limit for text
        return f"an integer of {value.bit_length()} bits"


def first_few(items, limit: int = 4, show=shown) -> str:
    """The first ``limit`` of ``items``, each as ``show`` writes it, and "and N more" for the rest."""
    items = list(items)
    text = ", ".join(show(i) for i in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _real(value) -> bool:
    """A real number: of Python, a NumPy scalar or a 0-d NumPy/CuPy array of integers or floats (bool is none)."""
    if isinstance(value, numbers.Real):
        return not isinstance(value, bool)
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return getattr(value, "shape", None) == () and kind in ("i", "u", "f")


def _finite(value) -> bool:
    """Finite and representable as a float64 (a 400-digit integer is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def finite_real(value) -> bool:
    """A real number (:func:`as_real` takes it): not bool, finite and representable as a float64."""
    return _real(value) and _finite(value)


def as_real(name: str, value) -> float:
    """``value``, a finite real number of any Python or NumPy type, as a float; InputError naming
    ``name`` for anything else (bool, str, None, complex, NaN, infinities, integers beyond float64)."""
    if not _real(value):
        raise InputError(f"{name} must be a number (got {shown(value)})")
    if not _finite(value):
        raise InputError(f"{name} must be a finite number (got {shown(value)})")
    return float(value)


def check_range(name: str, value, low=None, high=None, low_open=False, integer=False, high_open=False):
    """Raise InputError unless ``value`` is a finite real number and ``low <(=) value <(=) high``;
    returns value.

    The message names ``name`` and the allowed range, e.g. ``--re must be > 0 (got -1)``;
    NaN, infinities, integers beyond float64 and non-numbers (bool among them) are always rejected.
    """
    if not _real(value):
        raise InputError(f"{name} must be a number (got {shown(value)})")
    finite = _finite(value)
    if integer and not isinstance(value, numbers.Integral) and (not finite or int(value) != value):
        raise InputError(f"{name} must be an integer (got {shown(value)})")
    ok = finite
    if low is not None:
        ok = ok and (value > low if low_open else value >= low)
    if high is not None:
        ok = ok and (value < high if high_open else value <= high)
    if not ok:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {_number(low)}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {_number(high)}")
        tail = "" if finite or not parts else " and finite"
        raise InputError(f"{name} must be {' and '.join(parts or ['finite'])}{tail} (got {shown(value)})")
    return value


def _number(v) -> str:
    """An integer as is, a float in %g form (1e+06, 0.001)."""
    return str(v) if isinstance(v, int) else f"{v:g}"
