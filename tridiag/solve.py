"""tridiag.solve: batched tridiagonal solves on NumPy or CuPy arrays."""

from __future__ import annotations

from gpucfd.errors import InputError

from . import autotune, methods
from .checks import check_converged, check_finite
from .layout import canonical


def solve(
    a,
    b,
    c,
    d,
    method: str = "auto",
    axis: int = -1,
    layout: str = "auto",
    out=None,
    check: bool = True,
    info: dict | None = None,
    **options,
):
    """Solve a x[i-1] + b x[i] + c x[i+1] = d along ``axis``, batched over all other axes.

    a, b, c, d: NumPy or CuPy arrays (all of one kind; the result is of that kind), float32
        or float64 (float64 if any is), broadcast together; a is the sub-diagonal (a[0]
        ignored), b the diagonal, c the super-diagonal (c[n-1] ignored), d the right-hand
        sides. Broadcasting lets one matrix serve many right-hand sides, e.g. a, b, c of
        shape (n,) with d of shape (k, n).
    method: "auto" (CPU: thomas; GPU: the fastest direct method measured for this shape,
        cached), "thomas", "pta", "cr", "cr_sorted", "pcr", "checkerboard", "hybrid".
        NumPy inputs run each method's NumPy reference (same arithmetic as its kernel).
    axis: the axis along which the systems lie (length n >= 1).
    layout: "auto" solves in the inputs' own order (axis=-1: each system contiguous;
        axis=0 of a 2D array: systems interleaved, row k of all systems contiguous);
        "contiguous" or "interleaved" copies the inputs into that storage first.
    out: optional preallocated result (same kind, shape and dtype).
    check: raise ZeroPivotError (an InputError) naming the system and Thomas row when a
        direct solve gives inf/NaN, and ConvergenceError when checkerboard does not
        converge (reason "diverged" or "iteration cap"). check=False skips the device-to-
        host read: such systems then hold inf/NaN (or the last iterate).
    info: optional dict, filled with "method", "options" and, for checkerboard,
        "iterations" (per system, negative where not converged).
    options: hybrid: chunk (8, 16, 32; rows per thread). pcr: mapping ("auto", "block",
        "grid"), arrays (4 or 5 shared arrays). checkerboard: dop (rows per piece,
        default 8) or nop (pieces, dop = ceil(n / nop)), tol (default 1e-14 float64,
        1e-6 float32), maxiter (1000), memory ("shared", dop <= 32, or "global"), x0.
    """
    batch = canonical(a, b, c, d, axis, layout)
    opts = methods.options(method, options, batch)
    xp = batch.xp
    if out is not None and (
        type(out) is not type(batch.a) or tuple(out.shape) != batch.shape or out.dtype != batch.dtype
    ):
        raise InputError(
            f"out must be a {type(batch.a).__name__} of shape {batch.shape} and dtype "
            f"{batch.dtype} (got {type(out).__name__} {tuple(getattr(out, 'shape', ()))} "
            f"{getattr(out, 'dtype', '')})"
        )
    if method == "auto":
        method, opts = autotune.choose(batch)
    x3 = batch.canonical_out(out)
    direct = x3 is not None
    if not direct:
        x3 = xp.empty(batch.a.shape, dtype=batch.dtype)
    iters = methods.run(method, batch, x3, opts) if batch.nsys else None
    if info is not None:
        info.update(method=method, options={k: v for k, v in opts.items() if k != "x0"})
        if iters is not None:
            info["iterations"] = iters.reshape(batch.batch_shape)
    if check and batch.nsys:
        if iters is not None:
            check_converged(batch, iters, opts)
        else:
            check_finite(batch, x3, method)
    x = batch.restore(x3)
    if out is None:
        return x
    if not direct:
        out[...] = x
    return out
