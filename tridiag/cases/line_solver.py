"""Line systems of a 2D node grid: the tridiagonal systems along x or along y, solved by tridiag.solve;
and the names of the line solvers of the 2D flow commands (--solver).

Fields are (ny, nx) arrays (axis 0 = y, axis 1 = x, x contiguous). The systems along x
are the grid rows, those along y the grid columns. Each direction owns buffers a, b, c,
d, x, always seen as (ny, nx) arrays; their storage decides the layout the solver meets:

- "contiguous": every system's rows adjacent in memory (x-lines in (ny, nx) storage,
  y-lines in transposed (nx, ny) storage);
- "interleaved": row k of all systems adjacent, so that one thread per system reads
  coalesced (x-lines in transposed storage, y-lines in (ny, nx) storage).

Filling a buffer through its (ny, nx) view writes the transposed storage directly, so no
copy is made before or after a solve.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpucfd.errors import InputError

from ..solve import solve

# library solver name -> (tridiag method, layout of the x-lines, layout of the y-lines)
_NATURAL = ("contiguous", "interleaved")  # (ny, nx) storage for both directions: no transposes
SOLVERS = {
    "thomas": ("thomas", *_NATURAL),
    "pta": ("pta", "interleaved", "interleaved"),  # coalesced: the paper's Fig. 9d storage
    "pta-strided": ("pta", "contiguous", "contiguous"),  # uncoalesced: the paper's Fig. 9c storage
    "cr": ("cr", *_NATURAL),
    "pcr": ("pcr", *_NATURAL),
    "hybrid": ("hybrid", *_NATURAL),
    "tuned": ("auto", *_NATURAL),  # tridiag.solve's choice, measured per shape
}
FUSED = "fused"  # one launch per half sweep (tridiag.cases.vorticity_sweeps.FusedSweeps), GPU only
NAMES = ("auto", FUSED, *SOLVERS)


def check_solver(name: str) -> str:
    """``name`` if it is a known line solver, else InputError listing them."""
    if name not in NAMES:
        raise InputError(f"--solver must be one of {', '.join(NAMES)} (got {name!r})")
    return name


def resolve_solver(name: str, gpu: bool, fits: bool) -> str:
    """The solver that ``name`` stands for: "auto" is the fused sweeps on a GPU when the lines
    fit in shared memory (``fits``), else "tuned" there, and "thomas" on the CPU. InputError for
    "fused" without a GPU."""
    check_solver(name)
    if name == "auto":
        return (FUSED if fits else "tuned") if gpu else "thomas"
    if name == FUSED and not gpu:
        raise InputError("--solver fused needs a GPU (CuPy); on the CPU use thomas (or auto)")
    return name


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
    def create(cls, xp, shape, dtype, along: str, solver: str) -> "LineSystems":
        """Buffers for the systems along ``along`` ("x" or "y") of an (ny, nx) grid, laid out
        as ``solver`` (a key of SOLVERS) wants; edges preset to identity rows."""
        method, x_layout, y_layout = SOLVERS[solver]
        layout = x_layout if along == "x" else y_layout
        transposed = (along == "x") == (layout == "interleaved")
        storage = tuple(xp.zeros(shape[::-1] if transposed else shape, dtype) for _ in range(5))
        views = [s.T if transposed else s for s in storage]
        axis = {("x", False): 1, ("x", True): 0, ("y", False): 0, ("y", True): 1}[along, transposed]
        systems = cls(*views, method=method, axis=axis, storage=storage)
        systems.b[...] = 1
        return systems

    def solve(self):
        """Solve the systems into ``x`` (no validation: inf/NaN propagate); returns x."""
        a, b, c, d, x = self.storage
        solve(a, b, c, d, method=self.method, axis=self.axis, out=x, check=False)
        return self.x
