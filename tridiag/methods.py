"""The methods of tridiag.solve: their options, and how each runs on NumPy and on CuPy.

``run(method, batch, x3, opts)`` solves the canonical batch (tridiag.layout) into x3
(outer, n, inner). On the CPU every method runs its NumPy reference, which does the GPU
kernel's arithmetic vectorised over the batch; on the GPU its CUDA kernels.
"""

from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError, check_range

from .kernels import checkerboard, cyclic_reduction, hybrid, pcr, thomas

METHODS = ("auto", "thomas", "pta", "cr", "cr_sorted", "pcr", "checkerboard", "hybrid")
OPTIONS = {
    "hybrid": ("chunk",),
    "pcr": ("mapping", "arrays"),
    "checkerboard": ("dop", "nop", "tol", "maxiter", "memory", "x0"),
}
DEFAULT_TOL = {np.dtype(np.float64): 1e-14, np.dtype(np.float32): 1e-6}
DEFAULT_MAXITER = 1000


def options(method: str, given: dict, batch) -> dict:
    """Validated options of ``method`` with defaults filled in; InputError otherwise."""
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)} (got {method!r})")
    allowed = OPTIONS.get(method, ())
    for key in given:
        if key not in allowed:
            which = f"options {', '.join(allowed)}" if allowed else "no options"
            raise InputError(f"method {method!r} takes {which} (got {key!r})")
    opts = dict(given)
    if method == "hybrid":
        chunk = opts.get("chunk")
        if chunk is not None and chunk not in hybrid.CHUNKS:
            raise InputError(f"chunk must be None or one of {hybrid.CHUNKS} (got {chunk!r})")
    elif method == "pcr":
        opts.setdefault("mapping", "auto")
        opts.setdefault("arrays", 4)
        if opts["mapping"] not in pcr.MAPPINGS:
            raise InputError(f"mapping must be one of {', '.join(pcr.MAPPINGS)} (got {opts['mapping']!r})")
        if opts["arrays"] not in (4, 5):
            raise InputError(f"arrays must be 4 or 5 (got {opts['arrays']!r})")
    elif method == "checkerboard":
        _checkerboard_options(opts, batch)
    return opts


def _checkerboard_options(opts: dict, batch) -> None:
    n = batch.n
    if "dop" in opts and "nop" in opts:
        raise InputError("give dop (rows per piece) or nop (pieces per system), not both")
    if "nop" in opts:  # nop pieces requested: dop = ceil(n / nop)
        opts["dop"] = -(-n // int(check_range("nop", opts.pop("nop"), 1, n, integer=True)))
    opts["dop"] = int(check_range("dop", opts.get("dop", 8), 1, integer=True))
    opts.setdefault("memory", "shared" if opts["dop"] <= checkerboard.MAX_SHARED_DOP else "global")
    if opts["memory"] not in checkerboard.MEMORIES:
        raise InputError(f"memory must be one of {', '.join(checkerboard.MEMORIES)} (got {opts['memory']!r})")
    if opts["memory"] == "shared" and opts["dop"] > checkerboard.MAX_SHARED_DOP:
        raise InputError(f"dop must be <= {checkerboard.MAX_SHARED_DOP} with memory='shared' (got {opts['dop']})")
    opts["tol"] = float(check_range("tol", opts.get("tol", DEFAULT_TOL[batch.dtype]), 0, low_open=True))
    opts["maxiter"] = int(check_range("maxiter", opts.get("maxiter", DEFAULT_MAXITER), 1, integer=True))
    x0 = opts.get("x0")
    if x0 is not None:
        if type(x0) is not type(batch.a) or tuple(x0.shape) != batch.shape:
            raise InputError(
                f"x0 must be an array of the inputs' kind and shape {batch.shape} "
                f"(got {type(x0).__name__} {tuple(getattr(x0, 'shape', ()))})"
            )


def rows_first(v3, xp):
    """(outer, n, inner) -> (n, outer * inner) copy."""
    outer, n, inner = v3.shape
    return xp.array(xp.moveaxis(v3, 1, 0), order="C").reshape(n, outer * inner)


def run(method: str, batch, x3, opts: dict):
    """Solve ``batch`` into x3 by ``method``; returns checkerboard's iterations (host), else None."""
    xp = batch.xp
    if xp is np or method == "thomas":
        return _run_reference(method, batch, x3, opts)
    a, b, c, d = batch.a, batch.b, batch.c, batch.d
    if method == "pta":
        thomas.pta_cuda(a, b, c, d, x3)
    elif method in ("cr", "cr_sorted"):
        cyclic_reduction.cr_cuda(a, b, c, d, x3, sorted_levels=method == "cr_sorted")
    elif method == "pcr":
        pcr.pcr_cuda(a, b, c, d, x3, opts["mapping"], opts["arrays"])
    elif method == "hybrid":
        hybrid.hybrid_cuda(a, b, c, d, x3, opts.get("chunk"))
    elif method == "checkerboard":
        x0 = opts.get("x0")
        x3[...] = 0 if x0 is None else _canonical_like(x0, batch)
        iters = checkerboard.checkerboard_cuda(
            a, b, c, d, x3, opts["dop"], opts["tol"], opts["maxiter"], opts["memory"]
        )
        return iters.get()
    return None


def _canonical_like(v, batch):
    xp = batch.xp
    if batch.layout == "contiguous":
        v = xp.moveaxis(v, batch.axis, -1)
    elif batch.layout == "interleaved":
        v = xp.moveaxis(v, batch.axis, 0)
    return xp.ascontiguousarray(v, dtype=batch.dtype).reshape(batch.a.shape)


def _run_reference(method, batch, x3, opts):
    xp = batch.xp
    a, b, c, d = (rows_first(v, xp) for v in (batch.a, batch.b, batch.c, batch.d))
    a[0] = 0
    c[-1] = 0
    iters = None
    with np.errstate(all="ignore"):
        if method in ("thomas", "pta"):
            x = thomas.thomas_numpy(a, b, c, d, xp)
        elif method in ("cr", "cr_sorted"):
            x = cyclic_reduction.cr_numpy(a, b, c, d)
        elif method == "pcr":
            x = pcr.pcr_numpy(a, b, c, d)
        elif method == "hybrid":
            x = hybrid.hybrid_numpy(a, b, c, d, opts.get("chunk") or hybrid.GRID_CHUNK)
        else:
            x0 = opts.get("x0")
            x0 = None if x0 is None else rows_first(_canonical_like(x0, batch), xp)
            x, iters = checkerboard.checkerboard_numpy(a, b, c, d, opts["dop"], opts["tol"], opts["maxiter"], x0)
    outer, n, inner = x3.shape
    x3[...] = xp.moveaxis(x.reshape(n, outer, inner), 0, 1)
    return iters
