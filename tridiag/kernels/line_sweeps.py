"""Launchers of the fused line sweeps of the 2D cases (line_sweeps.cu).

Each sweep is one launch: one thread block per grid line builds the line's rows in shared
memory, solves them (line_solve.cuh) and writes the result. Fields (ny, nx) C order,
``fixed`` (ny, nx) bool; ``along`` "x" (a block per row) or "y" (a block per column); ``out``
must not overlap the inputs. The NumPy references: tridiag.cases.vorticity_sweeps.LibrarySweeps
for the transport, tridiag.cases.peaceman_rachford.LibraryADI for the ADI halves (rows by array
expressions, any tridiag.solve method) and tridiag.cases.vorticity.wall_vorticity for Thom's
formula; all are compiled without FMA contraction, so that they round alike.
"""

from __future__ import annotations

import numpy as np

from gpucfd.errors import InputError

from .build import MAX_SHARED, NULL, blocks, kernel, round_warp

SOURCE = "line_sweeps.cu"
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
        raise InputError(
            f"the fused sweeps hold lines of at most {longest_line(dtype)} nodes in {np.dtype(dtype).name} "
            f"(got {max(shape)}): choose a library --solver"
        )


def _launch(name: str, field, along: str, args: tuple) -> None:
    ny, nx = field.shape
    n = nx if along == "x" else ny
    shared = shared_bytes(n, field.itemsize)
    fn = kernel(SOURCE, name, field.dtype, shared, OPTIONS)
    pointers = [a for a in args if not isinstance(a, (float, int))]
    scalars = [field.dtype.type(a) for a in args if isinstance(a, (float, int))]
    fn(
        (ny if along == "x" else nx,),
        (threads(n),),
        (*pointers, np.int32(nx), np.int32(ny), np.int32(along == "y"), *scalars),
        shared_mem=shared,
    )


def transport_cuda(psi, w, fixed, out, along: str, coefficients: dict) -> None:
    """Half step of the vorticity transport implicit along ``along`` (line_sweeps.cu
    ``transport``): out = the new vorticity. ``coefficients``: two_hx, two_hy, diff, conv_k,
    diff_a, conv_a (tridiag.cases.vorticity_sweeps.transport_coefficients)."""
    c = coefficients
    _launch(
        "transport",
        psi,
        along,
        (psi, w, fixed, out, c["two_hx"], c["two_hy"], c["diff"], c["conv_k"], c["diff_a"], c["conv_a"]),
    )


def adi_first_cuda(u, source, fixed, out, along: str, s: float, s_across: float, two_rho: float) -> None:
    """First half of a Peaceman–Rachford double sweep in delta form (line_sweeps.cu ``adi_first``),
    implicit along ``along``: out = D. ``source`` None for none."""
    _launch("adi_first", u, along, (u, NULL if source is None else source, fixed, out, s, s_across, two_rho))


def adi_second_cuda(D, fixed, u, delta, along: str, s: float) -> None:
    """Second half (``adi_second``), implicit along ``along``: u += Δ, and ``delta`` = Δ unless None."""
    _launch("adi_second", u, along, (D, fixed, u, NULL if delta is None else delta, s))


def thom_cuda(psi, omega, table, relaxation: float) -> None:
    """Thom's wall vorticity at the nodes of ``table`` (tridiag.cases.vorticity.ThomTable), in place."""
    count = int(table.node.size)
    if count == 0:
        return
    fn = kernel(SOURCE, "thom", psi.dtype, 0, OPTIONS)
    fn(
        (blocks(count, THOM_THREADS),),
        (THOM_THREADS,),
        (
            psi,
            omega,
            table.node,
            table.nbr,
            table.coef,
            table.hspeed,
            table.count,
            np.int32(count),
            psi.dtype.type(relaxation),
        ),
    )
