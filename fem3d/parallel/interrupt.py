"""Stopping a run cleanly on SIGINT (Ctrl-C) or SIGTERM, on every rank.

Inside :func:`graceful_stop` the first SIGINT or SIGTERM only records the request; the
solvers look at it at safe points (each nonlinear step, each Krylov residual check) through
:class:`InterruptCheck`, which under MPI agrees over all ranks (one tiny reduction), so
that every rank leaves at the same point and the results can still be gathered and
written. A second signal ends the process at once, as without the handler. Exit codes
follow the shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Interrupted(Exception):
    """A stop was requested by ``signum``."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _record(signum, frame):
    _received.append(signum)
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once


@contextmanager
def graceful_stop():
    """Record SIGINT/SIGTERM instead of dying while the block runs (main thread only); the
    record is forgotten when the block ends, so a later solve is not stopped by it."""
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _received.clear()
    for s in SIGNALS:
        signal.signal(s, _record)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _received.clear()


def requested() -> int:
    """The signal number of a recorded stop request on this process, 0 if none."""
    return _received[0] if _received else 0


def agreed(comm) -> int:
    """The stop signal recorded on any rank of ``comm`` (collective), 0 if none."""
    signum = requested()
    return int(max(comm.allgather(signum))) if comm.size > 1 else signum


class InterruptCheck:
    """Called at safe points: raises Interrupted on every rank once any rank received a
    stop signal. ``every``: look only at every this many calls (Krylov progress checks)."""

    def __init__(self, comm, every: int = 1):
        self.comm, self.every, self.calls = comm, every, 0

    def __call__(self, *args) -> None:
        self.calls += 1
        if self.calls % self.every:
            return
        signum = agreed(self.comm)
        if signum:
            raise Interrupted(signum)
