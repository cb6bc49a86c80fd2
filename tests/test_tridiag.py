"""tridiag.solve: every method on CPU (NumPy references) and GPU (kernels), residuals,
layouts, options and bad input."""

import numpy as np
import pytest

import tridiag
from gpucfd.errors import ConvergenceError, InputError
from tridiag.kernels import hybrid

SIZES = (1, 2, 3, 5, 7, 64, 100, 1023, 1024, 1025)
DIRECT = ("thomas", "pta", "cr", "cr_sorted", "pcr", "hybrid")
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def system(rng, shape, axis=-1, dtype=np.float64):
    """Random strictly diagonally dominant systems: |b| >= |a| + |c| + 0.5."""
    a = rng.uniform(-1, 1, shape)
    c = rng.uniform(-1, 1, shape)
    b = (np.abs(a) + np.abs(c) + rng.uniform(0.5, 1.5, shape)) * rng.choice([-1, 1], shape)
    d = rng.uniform(-1, 1, shape)
    return [v.astype(dtype) for v in (a, b, c, d)]


def residual(a, b, c, d, x, axis=-1):
    """||A x - d|| / ||d|| in float64 on the host."""
    a, b, c, d, x = (np.moveaxis(np.asarray(v, np.float64), axis, -1) for v in (a, b, c, d, x))
    r = b * x - d
    r[..., 1:] += a[..., 1:] * x[..., :-1]
    r[..., :-1] += c[..., :-1] * x[..., 1:]
    return np.linalg.norm(r) / np.linalg.norm(d)


def run(backend, inputs, **kw):
    x = tridiag.solve(*(backend.asarray(v) for v in inputs), **kw)
    assert type(x) is type(backend.asarray(inputs[0]))
    return backend.to_numpy(x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("method", DIRECT + ("checkerboard",))
def test_residual_all_sizes(backend, method, dtype):
    rng = np.random.default_rng(7)
    for n in SIZES:
        arrays = system(rng, (3, n), dtype=dtype)
        x = run(backend, arrays, method=method)
        assert x.dtype == dtype and x.shape == (3, n)
        assert residual(*arrays, x) <= TOL[dtype], (method, n)


@pytest.mark.parametrize("method", DIRECT + ("checkerboard",))
def test_random_batches_and_axes(backend, method):
    rng = np.random.default_rng(11)
    for shape, axis in [((4, 37), 0), ((2, 3, 19), 1), ((2, 65, 3), -2), ((50,), 0), ((129, 40), 0)]:
        arrays = system(rng, shape)
        x = run(backend, arrays, method=method, axis=axis)
        assert residual(*arrays, x, axis) <= 1e-12, (method, shape, axis)


@pytest.mark.parametrize("method", DIRECT)
def test_same_result_as_thomas_reference(backend, method):
    rng = np.random.default_rng(3)
    arrays = system(rng, (6, 300))
    ref = tridiag.solve(*arrays, method="thomas")
    np.testing.assert_allclose(run(backend, arrays, method=method), ref, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("layout", ["auto", "contiguous", "interleaved"])
@pytest.mark.parametrize("method", ["pta", "hybrid", "pcr", "cr_sorted"])
def test_layouts(backend, method, layout):
    rng = np.random.default_rng(5)
    for axis in (0, 1):
        arrays = system(rng, (40, 33) if axis == 0 else (33, 40))
        x = run(backend, arrays, method=method, axis=axis, layout=layout)
        assert residual(*arrays, x, axis) <= 1e-12


@pytest.mark.parametrize("options", [dict(chunk=8), dict(chunk=16), dict(chunk=32)])
def test_hybrid_chunks(backend, options):
    rng = np.random.default_rng(8)
    for n in (1, 9, 31, 33, 200, 1025):
        arrays = system(rng, (5, n))
        assert residual(*arrays, run(backend, arrays, method="hybrid", **options)) <= 1e-12


@pytest.mark.parametrize("mapping", ["block", "grid"])
@pytest.mark.parametrize("arrays_", [4, 5])
def test_pcr_mappings(backend, mapping, arrays_):
    rng = np.random.default_rng(9)
    for n in (1, 2, 3, 255, 257, 1000):
        arrays = system(rng, (3, n))
        x = run(backend, arrays, method="pcr", mapping=mapping, arrays=arrays_)
        assert residual(*arrays, x) <= 1e-12


@pytest.mark.parametrize("options", [dict(dop=8), dict(dop=3, memory="global"), dict(nop=4), dict(dop=40)])
def test_checkerboard_options(backend, options):
    rng = np.random.default_rng(10)
    arrays = system(rng, (4, 301))
    info = {}
    x = run(backend, arrays, method="checkerboard", info=info, **options)
    assert residual(*arrays, x) <= 1e-12
    assert (info["iterations"] > 1).all() and (info["iterations"] < 100).all()


def test_checkerboard_warm_start_converges_at_once(backend):
    rng = np.random.default_rng(12)
    arrays = system(rng, (3, 200))
    exact = tridiag.solve(*arrays, method="thomas")
    info = {}
    run(backend, arrays, method="checkerboard", x0=backend.asarray(exact), info=info)
    assert (info["iterations"] <= 2).all()


def test_broadcast_rhs_and_out(backend):
    rng = np.random.default_rng(13)
    a, b, c, _ = system(rng, (64,))
    d = rng.uniform(-1, 1, (7, 64))
    out = backend.asarray(np.empty((7, 64)))
    x = tridiag.solve(*(backend.asarray(v) for v in (a, b, c, d)), method="hybrid", out=out)
    assert x is out
    assert (
        residual(
            np.broadcast_to(a, d.shape),
            np.broadcast_to(b, d.shape),
            np.broadcast_to(c, d.shape),
            d,
            backend.to_numpy(x),
        )
        <= 1e-12
    )


def test_mixed_precision_gives_float64(backend):
    rng = np.random.default_rng(14)
    a, b, c, d = system(rng, (2, 10))
    x = run(backend, [a.astype(np.float32), b, c, d], method="pta")
    assert x.dtype == np.float64


@pytest.mark.parametrize("method", DIRECT)
def test_zero_pivot_names_system_and_row(backend, method):
    rng = np.random.default_rng(15)
    arrays = system(rng, (4, 6))
    arrays[1][2, 0] = 0.0  # system 2: first pivot b[0] = 0
    with pytest.raises(tridiag.ZeroPivotError) as err:
        run(backend, arrays, method=method)
    assert err.value.system == (2,)
    assert err.value.row in (0, None)
    if method in ("thomas", "pta"):
        assert err.value.row == 0 and "row 0" in str(err.value)


def test_zero_pivot_flag_off_returns_nonfinite(backend):
    rng = np.random.default_rng(16)
    arrays = system(rng, (3, 5))
    arrays[1][1, 0] = 0.0
    x = run(backend, arrays, method="pta", check=False)
    assert not np.isfinite(x[1]).all() and np.isfinite(x[[0, 2]]).all()


def test_checkerboard_not_dominant_reports_reason(backend):
    n = 64
    a, c = np.full((2, n), 1.0), np.full((2, n), 1.0)
    b = np.full((2, n), 0.5)
    b[0] = 3.0
    d = np.ones((2, n))
    with pytest.raises(ConvergenceError) as err:
        run(backend, [a, b, c, d], method="checkerboard", maxiter=50)
    assert err.value.reason in ("diverged", "iteration cap")
    assert "system (1,)" in str(err.value) and "not diagonally dominant" in str(err.value)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(d=np.ones((3, 5))), "broadcast"),
        (dict(b=np.ones((2, 4))), "broadcast"),
        (dict(a=np.ones((2, 5), dtype=np.int64)), "a: dtype must be float32 or float64"),
        (dict(d=np.ones((2, 5), dtype=np.complex128)), "d: dtype"),
        (dict(method="lu"), "method must be one of"),
        (dict(axis=2), "axis must be"),
        (dict(layout="rows"), "layout must be"),
        (dict(method="pta", dop=4), "takes no options"),
        (dict(method="hybrid", chunk=12), "chunk must be"),
        (dict(method="pcr", arrays=3), "arrays must be 4 or 5"),
        (dict(method="checkerboard", dop=0), "dop must be"),
        (dict(method="checkerboard", dop=64, memory="shared"), "dop must be <= 32"),
        (dict(method="checkerboard", dop=4, nop=2), "not both"),
        (dict(method="checkerboard", tol=-1.0), "tol must be"),
        (dict(out=np.ones((5, 2))), "out must be"),
    ],
)
def test_bad_input(bad, match):
    args = dict(a=np.ones((2, 5)), b=np.full((2, 5), 4.0), c=np.ones((2, 5)), d=np.ones((2, 5)))
    args.update({k: v for k, v in bad.items() if k in args})
    kwargs = {k: v for k, v in bad.items() if k not in args}
    with pytest.raises(InputError, match=match):
        tridiag.solve(args["a"], args["b"], args["c"], args["d"], **kwargs)


def test_empty_system_rejected():
    with pytest.raises(InputError, match="must be >= 1"):
        tridiag.solve(*(np.ones((3, 0)) for _ in range(4)))


def test_empty_batch_gives_empty_result():
    x = tridiag.solve(*(np.ones((0, 4)) for _ in range(4)), method="hybrid")
    assert x.shape == (0, 4)


def test_auto_picks_a_method(backend):
    rng = np.random.default_rng(17)
    arrays = system(rng, (8, 500))
    info = {}
    x = run(backend, arrays, info=info)
    assert info["method"] in DIRECT
    assert residual(*arrays, x) <= 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hybrid_gpu_large_paths(backend, dtype):
    """One block per system up to its limit, then reduce/expand with a recursive reduced solve."""
    if not backend.is_gpu:
        pytest.skip("GPU paths")
    rng = np.random.default_rng(18)
    for n, chunk in ((8192, 32), (8192, 16), (4096, 8), (16384, None), (20000, None)):
        if chunk is not None and not hybrid.onchip_fits(n, chunk, dtype):
            continue
        arrays = system(rng, (3, n), dtype=dtype)
        x = run(backend, arrays, method="hybrid", chunk=chunk)
        assert residual(*arrays, x) <= TOL[dtype], (n, chunk)
    arrays = system(rng, (5000, 300), dtype=dtype)  # interleaved: reduce/expand
    assert residual(*arrays, run(backend, arrays, method="hybrid", axis=0), 0) <= TOL[dtype]
