"""After a solve: turn a broken-down direct solve or an unconverged iteration into an error."""

from __future__ import annotations

import numpy as np

from gpucfd.errors import ConvergenceError, InputError

from .errors import ZeroPivotError
from .kernels.thomas import first_zero_pivot


def _host_system(batch, s: int):
    """(a, b, c, d) of canonical system s as float64 host arrays (n, 1), a[0] = c[n-1] = 0."""
    o, i = divmod(s, batch.inner)
    rows = [
        np.asarray(batch.xp.asnumpy(v[o, :, i]) if batch.xp is not np else v[o, :, i], np.float64)
        for v in (batch.a, batch.b, batch.c, batch.d)
    ]
    rows[0] = rows[0].copy()
    rows[2] = rows[2].copy()
    rows[0][0] = 0
    rows[2][-1] = 0
    return [r[:, None] for r in rows]


def check_finite(batch, x3, method: str) -> None:
    """Raise if some system's solution is not finite: bad input, zero pivot or breakdown."""
    xp = batch.xp
    bad = ~xp.isfinite(x3).all(axis=1)  # (outer, inner)
    if not bool(bad.any()):
        return
    s = int(xp.argmax(bad.ravel()))
    where = batch.system_index(s)
    a, b, c, d = _host_system(batch, s)
    if not all(np.isfinite(v).all() for v in (a, b, c, d)):
        raise InputError(f"a, b, c, d must be finite (system {where} holds NaN or inf)")
    row = int(first_zero_pivot(a, b, c)[0])
    if row >= 0:
        raise ZeroPivotError(
            f"b: zero pivot in system {where} at row {row} of the Thomas elimination "
            "(the system is singular or needs pivoting)",
            where,
            row,
        )
    raise ZeroPivotError(
        f"method {method!r} broke down in system {where} (a zero or overflowing pivot in its "
        "own elimination order, Thomas pivots are nonzero); use method='thomas' or 'pta'",
        where,
        None,
    )


def check_converged(batch, iters, opts: dict) -> None:
    """Raise ConvergenceError naming the first system the checkerboard iteration left unconverged."""
    failed = np.flatnonzero(iters <= 0)
    if failed.size == 0:
        return
    s = int(failed[0])
    where = batch.system_index(s)
    a, b, c, _ = _host_system(batch, s)
    weak = np.flatnonzero(np.abs(b[:, 0]) < np.abs(a[:, 0]) + np.abs(c[:, 0]))
    dominance = (
        f"it is not diagonally dominant (row {int(weak[0])}: |b| < |a| + |c|)"
        if weak.size
        else "it is diagonally dominant"
    )
    if -iters[s] < opts["maxiter"]:
        reason = "diverged"
        what = f"diverged after {-int(iters[s])} iterations"
    else:
        reason = "iteration cap"
        what = f"did not reach tol={opts['tol']:g} in maxiter={opts['maxiter']} iterations"
    raise ConvergenceError(
        f"checkerboard {what} in system {where} of {failed.size} failing; {dominance}; "
        "use a direct method (e.g. method='hybrid' or 'thomas')",
        reason,
    )
