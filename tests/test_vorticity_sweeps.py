"""The fused sweeps (one launch per half sweep) against their NumPy reference, rows by array
expressions solved by Thomas: each kernel alone, whole marches, graph replay against direct
launches; and the meaning of --solver."""

import numpy as np
import pytest

from gpucfd.backend import cupy_module, get_backend
from gpucfd.errors import InputError
from tridiag.kernels.line_sweeps import longest_line
from tridiag.cases.line_solver import LineSolver, resolve_solver
from tridiag.cases.vorticity import Boundary, Grid
from tridiag.cases.peaceman_rachford import parameters, spectrum
from tridiag.cases.vorticity_solver import VorticitySolver
from tridiag.cases.vorticity_sweeps import FusedSweeps, LibrarySweeps, make_sweeps

gpu = pytest.mark.gpu


def obstacle(xp, cells=(40, 23), dtype=np.float64):
    """A moving-lid box with hx != hy and a block inside (fixed nodes off the edges, convex corners)."""
    grid = Grid.box(1.3, 1.0, *cells)
    fixed = np.ones(grid.shape, dtype=bool)
    fixed[1:-1, 1:-1] = False
    fixed[6:10, 9:15] = True
    lid = np.zeros(grid.shape)
    lid[-1] = 1.0
    return Boundary.create(xp, grid, fixed, wall_u=lid, dtype=dtype)


def random_fields(grid, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, grid.shape), rng.uniform(-5, 5, grid.shape)


def test_solver_names_resolve_per_device():
    short, long = 2001, 9000
    assert resolve_solver("auto", True, short, True) == LineSolver("fused", None, None)
    assert resolve_solver("auto", True, short, True, fused_first=False).name == "tuned"
    assert resolve_solver("auto", True, short, False) == LineSolver("tuned", "auto", ("contiguous", "contiguous"))
    assert resolve_solver("auto", False, short, True) == LineSolver("thomas", "thomas", ("contiguous", "interleaved"))
    assert resolve_solver("pta", False, short, True).layouts == ("interleaved", "interleaved")
    assert resolve_solver("pcr", True, short, True, "natural").layouts == ("contiguous", "interleaved")
    assert resolve_solver("fused", True, long, True).fused
    with pytest.raises(InputError, match="--solver fused needs a GPU"):
        resolve_solver("fused", False, short, True)
    with pytest.raises(InputError, match="lines of 9000 nodes do not fit"):
        resolve_solver("fused", True, 9000, False)
    with pytest.raises(InputError, match="--solver must be one of auto, fused, thomas"):
        resolve_solver("magic", True, short, True)
    with pytest.raises(InputError, match="--layout must be one of auto, natural, contiguous, interleaved"):
        resolve_solver("pcr", True, short, True, "diagonal")
    b = obstacle(np)
    assert isinstance(make_sweeps(np, b, 100.0, 0.01, np.float64, "auto"), LibrarySweeps)
    assert longest_line(np.float64) > 4096 and longest_line(np.float32) > 8192


@gpu
@pytest.mark.parametrize("cells", [(40, 23), (1200, 7)])  # (1200, 7): x-lines of 1201 nodes, 5 rows per chunk
def test_each_fused_sweep_equals_the_reference(cells):
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    cp = cupy_module()
    ref_b, dev_b = obstacle(np, cells), obstacle(cp, cells)
    ref = LibrarySweeps(np, ref_b, 250.0, 0.013, np.float64, resolve_solver("thomas", False, max(cells) + 1, True))
    dev = FusedSweeps(cp, dev_b, 250.0, 0.013, np.float64)
    psi, omega = random_fields(ref_b.grid, 1)
    rho = parameters(*spectrum(ref_b.grid.shape, ref_b.grid.hx, ref_b.grid.hy), 8)[
        4
    ]  # mid-cycle: the smallest make the long lines near-singular (cond ~ 1e5)
    for name, call in (
        ("walls", lambda s, p, w: s.walls(p, w, 0.7)),
        ("transport", lambda s, p, w: s.transport(p, w)),
        ("poisson", lambda s, p, w: s.poisson(p, w, rho)),
    ):
        p_ref, w_ref = psi.copy(), omega.copy()
        p_dev, w_dev = cp.asarray(psi), cp.asarray(omega)
        call(ref, p_ref, w_ref)
        call(dev, p_dev, w_dev)
        for a, b in ((p_dev, p_ref), (w_dev, w_ref)):
            assert np.abs(a.get() - b).max() <= 1e-12 * np.abs(b).max(), name
        assert np.abs(w_ref - omega).max() + np.abs(p_ref - psi).max() > 0.1, name  # the sweep did something


@gpu
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-4)])
def test_fused_march_with_graphs_equals_the_numpy_reference(dtype, tol):
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    runs = []
    for backend, solver in ((get_backend("cpu"), "thomas"), (get_backend("gpu"), "fused")):
        xp = backend.xp
        vs = VorticitySolver(backend, obstacle(xp, dtype=dtype), 100.0, 0.01, solver=solver, psi_sweeps=3, dtype=dtype)
        psi, omega = xp.zeros(vs.grid.shape, dtype), xp.zeros(vs.grid.shape, dtype)
        vs.march(psi, omega, 90, check_every=30)  # 30 steps direct, then a captured graph replayed twice
        runs.append((backend.to_numpy(psi), backend.to_numpy(omega)))
        if (
            backend.is_gpu
        ):  # blocks of 90 ψ sweeps start at phases 0 (run direct: warm-up), 2 and 4 of the 8-long ρ cycle
            assert sorted(vs.graphs.graphs) == [(2, 30), (4, 30)]
    (p0, w0), (p1, w1) = runs
    assert np.abs(w0).max() > 1
    assert np.abs(p1 - p0).max() <= tol * np.abs(p0).max() and np.abs(w1 - w0).max() <= tol * np.abs(w0).max()
