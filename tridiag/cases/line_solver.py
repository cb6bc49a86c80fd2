"""Line systems of a 2D node grid and the line solvers of the 2D commands (``--solver``, ``--layout``).

Fields are (ny, nx) arrays (axis 0 = y, axis 1 = x, x contiguous). The systems along x
are the grid rows, those along y the grid columns. Each direction owns buffers a, b, c,
d, x, always seen as (ny, nx) arrays; their storage is the layout the solver meets, in the
vocabulary of tridiag.layout:

- "contiguous": every system's rows adjacent in memory (x-lines in (ny, nx) storage,
  y-lines in transposed (nx, ny) storage);
- "interleaved": row k of all systems adjacent, so that one thread per system reads
  coalesced (x-lines in transposed storage, y-lines in (ny, nx) storage).

``--layout`` names the pair (x-lines, y-lines): "natural" (contiguous, interleaved: both in
(ny, nx) storage, no transposes), "contiguous" (both contiguous: Wei et al. 2013's transposed
y sweep), "interleaved" (both interleaved: the paper's coalesced storage for PTA). Filling a
buffer through its (ny, nx) view writes the transposed storage directly.

``--solver``: "fused" (one launch per half sweep, rows built and solved in shared memory:
tridiag.kernels.line_sweeps; GPU only), a tridiag.solve method (rows built by array
expressions or one right-hand-side kernel, then solved by that method), "tuned"
(tridiag.solve's own choice, measured per shape) or "auto", the fastest in the benchmarks
(docs/performance.md: 2D cavity, square cylinder, ADI heat conduction): on a GPU, fused for
the vorticity–stream-function flows when the lines fit (their library path is
launch-bound) and tuned with contiguous lines for ADI heat (its library sweep is five
bandwidth-bound launches, faster than the fused one at every size); thomas on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucfd.errors import InputError

from ..methods import METHODS
from ..solve import solve

FUSED = "fused"
LIBRARY = (*(m for m in METHODS if m != "auto"), "tuned")  # "tuned" is tridiag.solve's "auto"
NAMES = ("auto", FUSED, *LIBRARY)
ITERATIVE = ("checkerboard",)  # solves to a tolerance from a start value: the ADI heat cases only
LAYOUTS = {
    "natural": ("contiguous", "interleaved"),
    "contiguous": ("contiguous", "contiguous"),
    "interleaved": ("interleaved", "interleaved"),
}
LAYOUT_NAMES = ("auto", *LAYOUTS)


@dataclass(frozen=True)
class LineSolver:
    """A resolved choice: ``name`` (FUSED or a LIBRARY name), the tridiag.solve ``method`` and
    the ``layouts`` (x-lines, y-lines) of a library solver (None for the fused sweeps)."""

    name: str
    method: str | None
    layouts: tuple | None

    @property
    def fused(self) -> bool:
        return self.name == FUSED


def check_solver(name: str, layout: str = "auto", iterative: bool = False) -> str:
    """``name`` if it is a known line solver (an ITERATIVE one only with ``iterative``) and
    ``layout`` a known layout (not with "fused"); else InputError."""
    if name not in NAMES:
        raise InputError(f"--solver must be one of {', '.join(NAMES)} (got {name!r})")
    if name in ITERATIVE and not iterative:
        raise InputError(f"--solver {name} is an iterative line solver, offered by the ADI heat cases only")
    if layout not in LAYOUT_NAMES:
        raise InputError(f"--layout must be one of {', '.join(LAYOUT_NAMES)} (got {layout!r})")
    if name == FUSED and layout != "auto":
        raise InputError("--layout applies to the library solvers (the fused sweeps keep every line in shared memory)")
    return name


def resolve_solver(
    name: str,
    gpu: bool,
    longest: int,
    fits: bool,
    layout: str = "auto",
    iterative: bool = False,
    fused_first: bool = True,
) -> LineSolver:
    """The LineSolver ``name`` stands for on a GPU (``gpu``) or the CPU, for lines of at most
    ``longest`` nodes of which the fused sweeps hold them (``fits``); ``fused_first``: "auto"
    takes the fused sweeps on a GPU where they fit (the flows), else tuned (ADI heat).
    InputError for "fused" without a GPU or with lines that do not fit, and for what
    :func:`check_solver` refuses."""
    check_solver(name, layout, iterative)
    if name == "auto":
        name = (FUSED if fits and fused_first else "tuned") if gpu else "thomas"
    if name == FUSED:
        if not gpu:
            raise InputError("--solver fused needs a GPU (CuPy); on the CPU use thomas (or auto)")
        if not fits:
            raise InputError(
                f"--solver fused holds each line in shared memory, and lines of {longest} nodes "
                "do not fit: choose a library --solver"
            )
        return LineSolver(FUSED, None, None)
    if layout == "auto":
        layout = "interleaved" if name == "pta" else "natural" if name == "thomas" else "contiguous"
    return LineSolver(name, "auto" if name == "tuned" else name, LAYOUTS[layout])


@dataclass
class LineSystems:
    """Buffers of the systems along one direction: a, b, c, d, x as (ny, nx) views."""

    a: object
    b: object
    c: object
    d: object
    x: object
    method: str
    axis: int  # solve axis of the storage arrays
    storage: tuple  # the five C-contiguous storage arrays behind a, b, c, d, x

    @classmethod
    def create(cls, xp, shape, dtype, along: str, solver: LineSolver) -> "LineSystems":
        """Buffers for the systems along ``along`` ("x" or "y") of an (ny, nx) grid, laid out
        as the library ``solver`` wants; edges preset to identity rows."""
        transposed = storage_transposed(along, solver.layouts)
        storage = tuple(xp.zeros(shape[::-1] if transposed else shape, dtype) for _ in range(5))
        views = [s.T if transposed else s for s in storage]
        systems = cls(*views, method=solver.method, axis=solve_axis(along, transposed), storage=storage)
        systems.b[...] = 1
        return systems

    def solve(self):
        """Solve the systems into ``x`` (no validation: inf/NaN propagate); returns x."""
        a, b, c, d, x = self.storage
        solve(a, b, c, d, method=self.method, axis=self.axis, out=x, check=False)
        return self.x


def storage_transposed(along: str, layouts: tuple) -> bool:
    """Whether the systems along ``along`` live in transposed (nx, ny) storage."""
    return (along == "x") == (layouts[0 if along == "x" else 1] == "interleaved")


def solve_axis(along: str, transposed: bool) -> int:
    """Solve axis of the storage arrays of the systems along ``along``."""
    return 1 if (along == "x") != transposed else 0
