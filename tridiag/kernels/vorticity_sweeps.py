"""Launchers of the fused vorticity–stream-function sweeps (vorticity_sweeps.cu).

Each sweep is one launch: one thread block per grid line builds the line's rows in shared
memory, solves them (line_solve.cuh) and writes the result. Fields (ny, nx) C order,
``fixed`` (ny, nx) bool; ``along`` "x" (a block per row) or "y" (a block per column); ``out``
must not overlap the inputs. The NumPy references are tridiag.cases.vorticity_sweeps.LibrarySweeps
(rows by array expressions, any tridiag.solve method) and tridiag.cases.vorticity.wall_vorticity;
all are compiled without FMA contraction, so that they round alike.
"""
from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError

from .build import MAX_SHARED, blocks, kernel, round_warp

SOURCE = "vorticity_sweeps.cu"
OPTIONS = ("--fmad=false",)
ROWS_PER_THREAD = 4  # chunk length the thread count aims at (line_solve.cuh)
MAX_THREADS = 1024
THOM_THREADS = 128


def threads(n: int) -> int:
    """Threads of the block that solves a line of ``n`` nodes."""
    return min(MAX_THREADS, round_warp(-(-n // ROWS_PER_THREAD)))


def shared_bytes(n: int, itemsize: int) -> int:
    """Dynamic shared memory of a line of ``n`` nodes: a, b, c, d, then the reduced rows,
    F relations and reduced solution of line_solve.cuh."""
    return (4 * n + 8 * threads(n)) * itemsize


def longest_line(dtype) -> int:
    """The most nodes a line of ``dtype`` may have to fit in one block's shared memory."""
    itemsize, n = np.dtype(dtype).itemsize, MAX_SHARED // (4 * np.dtype(dtype).itemsize)
    while shared_bytes(n, itemsize) > MAX_SHARED:
        n -= 1
    return n


def check_fits(shape, dtype) -> None:
    """InputError unless the lines of the (ny, nx) grid fit in one block's shared memory."""
    if max(shape) > longest_line(dtype):
        raise InputError(f"the fused sweeps hold lines of at most {longest_line(dtype)} nodes in {np.dtype(dtype).name} "
                         f"(got {max(shape)}): choose a library --solver")


def _launch(name: str, field, along: str, args: tuple) -> None:
    ny, nx = field.shape
    n = nx if along == "x" else ny
    shared = shared_bytes(n, field.itemsize)
    fn = kernel(SOURCE, name, field.dtype, shared, OPTIONS)
    fn((ny if along == "x" else nx,), (threads(n),), (*args[:4], np.int32(nx), np.int32(ny), np.int32(along == "y"),
                                                      *(field.dtype.type(v) for v in args[4:])), shared_mem=shared)


def transport_cuda(psi, w, fixed, out, along: str, coefficients: dict) -> None:
    """Half step of the vorticity transport implicit along ``along`` (vorticity_sweeps.cu
    ``transport``): out = the new vorticity. ``coefficients``: two_hx, two_hy, diff, conv_k,
    diff_a, conv_a (tridiag.cases.vorticity_sweeps.transport_coefficients)."""
    c = coefficients
    _launch("transport", psi, along, (psi, w, fixed, out, c["two_hx"], c["two_hy"], c["diff"], c["conv_k"],
                                      c["diff_a"], c["conv_a"]))


def poisson_cuda(psi, omega, fixed, out, along: str, coefficients: dict) -> None:
    """Half of a Peaceman–Rachford sweep of ∇²ψ = −ω implicit along ``along``: out = the new ψ.
    ``coefficients``: rho, off, diag, inv_ha2 (tridiag.cases.vorticity_sweeps.poisson_coefficients)."""
    c = coefficients
    _launch("poisson", psi, along, (psi, omega, fixed, out, c["rho"], c["off"], c["diag"], c["inv_ha2"]))


def thom_cuda(psi, omega, table, relaxation: float) -> None:
    """Thom's wall vorticity at the nodes of ``table`` (tridiag.cases.vorticity.ThomTable), in place."""
    count = int(table.node.size)
    if count == 0:
        return
    fn = kernel(SOURCE, "thom", psi.dtype, 0, OPTIONS)
    fn((blocks(count, THOM_THREADS),), (THOM_THREADS,),
       (psi, omega, table.node, table.nbr, table.coef, table.hspeed, table.count, np.int32(count),
        psi.dtype.type(relaxation)))
