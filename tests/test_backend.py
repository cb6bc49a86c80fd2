import subprocess
import sys
import time

import numpy as np
import pytest

from gpucfd import backend as bk
from gpucfd.errors import InputError


@pytest.fixture
def no_cupy(monkeypatch):
    """Make `import cupy` fail, as on a machine without CuPy."""
    monkeypatch.setitem(sys.modules, "cupy", None)
    bk.cupy_module.cache_clear()
    yield
    bk.cupy_module.cache_clear()


def test_auto_falls_back_to_numpy_without_cupy(no_cupy):
    assert bk.cupy_module() is None
    b = bk.get_backend("auto")
    assert b.kind == "cpu" and b.xp is np and not b.is_gpu
    x = b.asarray([1.0, 2.0])
    assert isinstance(x, np.ndarray) and b.to_numpy(x).tolist() == [1.0, 2.0]
    assert b.describe().startswith("cpu")


def test_gpu_requested_without_gpu_is_input_error(no_cupy):
    with pytest.raises(InputError, match="--device gpu"):
        bk.get_backend("gpu")


def test_unknown_device_names_allowed_values():
    with pytest.raises(InputError, match="auto, cpu, gpu"):
        bk.get_backend("tpu")


def test_dtype_resolution():
    assert bk.resolve_dtype("float32") == np.float32
    with pytest.raises(InputError, match="float64, float32"):
        bk.resolve_dtype("int8")


def test_phase_timer_accumulates(backend):
    t = bk.PhaseTimer(backend)
    for _ in range(2):
        with t("a"):
            backend.xp.ones(10).sum()
    assert set(t.as_dict()) == {"a"} and t.as_dict()["a"] > 0


def test_phase_timer_records_disjoint_intervals_only(backend):
    """Each second in one phase: a phase inside another, or an interval charged from before
    the end of one recorded, is refused; the sum stays within the time elapsed."""
    t0 = time.perf_counter()
    t = bk.PhaseTimer(backend)
    t.charge("prep", t0)
    with t("a"):
        with pytest.raises(RuntimeError, match="inside phase 'a'"), t("b"):
            pass
        with pytest.raises(RuntimeError, match="inside phase 'a'"):
            t.charge("prep", t0)
    with pytest.raises(RuntimeError, match="overlaps"):
        t.charge("prep", t0)
    with t("b"):
        time.sleep(0.01)
    assert set(t.as_dict()) == {"prep", "a", "b"} and sum(t.as_dict().values()) <= time.perf_counter() - t0


def test_process_seconds_count_from_the_process_start():
    """A child process's wall time so far: at least the time since it began to import
    gpucfd, at most its life measured from outside."""
    code = (
        "import time; t = time.perf_counter(); from gpucfd.backend import process_seconds; wall, since = "
        "process_seconds(); print(wall, time.perf_counter() - t, since)"
    )
    t0 = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    outside = time.perf_counter() - t0
    wall, since_import, since = child.stdout.split(maxsplit=2)
    assert since.strip() == ("process start" if sys.platform == "linux" else "gpucfd import")
    assert float(since_import) <= float(wall) <= outside


def test_time_call_returns_median_seconds(backend):
    calls = []
    sec = backend.time_call(lambda: calls.append(1), repeat=5, warmup=2)
    assert len(calls) == 7 and 0 <= sec < 1


def test_nccl_only_where_every_rank_has_a_gpu_of_its_own():
    from fem3d.parallel.comm import wants_nccl

    assert wants_nccl("auto", True, 2, shared_gpu=False)
    assert not wants_nccl("auto", True, 2, shared_gpu=True)  # NCCL refuses two ranks on one GPU
    assert not wants_nccl("auto", True, 1, shared_gpu=False) and not wants_nccl("auto", False, 4, shared_gpu=False)
    assert not wants_nccl("mpi", True, 2, shared_gpu=False) and wants_nccl("nccl", True, 2, shared_gpu=False)
    with pytest.raises(InputError, match="one GPU per rank"):
        wants_nccl("nccl", True, 2, shared_gpu=True)
    with pytest.raises(InputError, match="needs GPUs and CuPy built with NCCL"):
        wants_nccl("nccl", False, 2, shared_gpu=False)


def test_ranks_of_an_mpi_launch_share_the_cores_among_their_blas_pools():
    """k ranks on one machine get cores // k threads per pool (at least 1), a pool size the
    user set is kept, and a process not started by a launcher is left alone."""
    import os

    from gpucfd.threads import POOLS, share_cores_among_ranks

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = {"MPI_LOCALNRANKS": "2", "OMP_NUM_THREADS": "7"}
    share_cores_among_ranks(env)
    assert (
        env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(max(1, cores // 2))
        and env["OMP_NUM_THREADS"] == "7"
    )
    env = {"OMPI_COMM_WORLD_LOCAL_SIZE": str(4 * cores)}
    share_cores_among_ranks(env)
    assert all(env[v] == "1" for v in POOLS)
    for alone in ({}, {"MPI_LOCALNRANKS": "1"}):
        share_cores_among_ranks(alone)
        assert not any(v in alone for v in POOLS)


def test_blas_pools_loaded_before_gpucfd_are_resized_to_the_ranks_share():
    """A rank whose script imported NumPy before gpucfd (its OpenBLAS pool sized to every
    core) gets the pool of its share: one thread where as many ranks as cores share the
    machine."""
    import os
    import subprocess
    import sys

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores < 2:
        pytest.skip("one core: the pool has one thread either way")
    script = (
        "import numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "before = max(p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas')\n"
        "import gpucfd\n"
        "after = max(p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas')\n"
        "print(before, after)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(MPI_LOCALNRANKS=str(cores), MPI_LOCALRANKID="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(cores), "1"]


def test_a_rank_bound_to_one_core_gets_its_share_of_the_machine():
    """Open MPI binds each of two ranks to one core; such a rank is given its block of the
    machine's CPUs (the blocks cover every CPU once) and pools of that size, an unbound rank
    keeps its CPUs, and a refused widening keeps the binding."""
    from gpucfd.threads import POOLS, rank_cpus, share_cores_among_ranks

    blocks = [rank_cpus(r, 3, range(8)) for r in range(3)]
    assert (
        blocks == [[0, 1], [2, 3, 4], [5, 6, 7]]
        and rank_cpus(3, 4, range(3)) == [2]
        and rank_cpus(0, 4, range(3)) == []
    )
    machine = set(range(32))

    def launch(mine, rank=1, refuse=False):
        given = []

        def put(cpus):
            if refuse:
                raise OSError("not allowed")
            given.append(list(cpus))

        env = {"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank)}
        share_cores_among_ranks(env, (lambda: mine, put, lambda: machine))
        return given, {env[v] for v in POOLS}

    assert launch({1}) == ([list(range(16, 32))], {"16"})
    assert launch({0}, rank=0) == ([list(range(16))], {"16"})
    assert launch(machine) == ([], {"16"})
    assert launch({1}, refuse=True) == ([], {"1"})


def test_importing_fem3d_sizes_the_pools_before_numpy_loads():
    """`python -m fem3d.cavity` under a launcher: fem3d's first import sets the pool sizes
    while NumPy (whose BLAS reads them when it loads) is not imported yet."""
    import os
    import subprocess

    code = "import sys, os, fem3d; print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMPI_COMM_WORLD_LOCAL_SIZE")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, "MPI_LOCALNRANKS": "64"}, capture_output=True, text=True
    )
    assert out.stdout.split() == ["1", "False"], out.stderr


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batched_products_equal_einsum_whether_or_not_cut_over_threads(monkeypatch, dtype):
    """gpucfd.threads.batched_matvec against einsum, each way round, on one thread and with
    the stack cut into three ranges on three threads (a cut must change no element's product)."""
    from concurrent.futures import ThreadPoolExecutor

    from gpucfd import threads

    rng = np.random.default_rng(5)
    mats, x = rng.standard_normal((7, 5, 5)).astype(dtype), rng.standard_normal((7, 5)).astype(dtype)
    single = {t: threads.batched_matvec(mats, x, t) for t in (False, True)}
    for t, spec in ((False, "eij,ej->ei"), (True, "eji,ej->ei")):
        assert single[t].dtype == dtype and single[t].shape == (7, 5)
        assert np.abs(single[t] - np.einsum(spec, mats, x)).max() < 20 * np.finfo(dtype).eps
    with ThreadPoolExecutor(3) as pool:
        monkeypatch.setattr(threads, "_pool", lambda: (3, pool))
        monkeypatch.setattr(threads, "SPLIT_ENTRIES", 0)
        for t in (False, True):
            assert np.array_equal(threads.batched_matvec(mats, x, t), single[t])


def test_distinct_equals_numpys_unique_on_integer_arrays(backend):
    from gpucfd.sets import distinct

    rng = np.random.default_rng(3)
    for a in (
        rng.integers(-50, 50, (40, 27)),
        rng.integers(0, 2**40, 1000).repeat(3),
        np.zeros(0, np.int32),
        np.array([7], np.uint8),
        rng.integers(0, 5, 9).astype(np.int32),
    ):
        got = distinct(backend.asarray(a), backend.xp)
        assert isinstance(got, type(backend.xp.zeros(1)))
        assert got.dtype == a.dtype and np.array_equal(backend.to_numpy(got), np.unique(a))
    with pytest.raises(TypeError, match="integer"):
        distinct(backend.asarray(np.array([1.0, np.nan])), backend.xp)


def test_members_of_a_range_equal_numpys_unique(backend):
    from gpucfd.sets import members

    rng = np.random.default_rng(4)
    for a, n in (
        (rng.integers(0, 50, (40, 27)), 50),
        (rng.integers(0, 1000, 30).repeat(3), 1000),
        (np.zeros(0, np.int64), 3),
        (np.array([[2, 0], [2, 2]], np.int32), 3),
    ):
        got = members(backend.asarray(a), n, backend.xp)
        assert np.array_equal(backend.to_numpy(got), np.unique(a))
