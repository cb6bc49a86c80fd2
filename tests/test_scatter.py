"""fem3d.kernels.scatter: sums by a fixed index pattern, in a fixed order on either backend."""

import numpy as np
import pytest

from gpucfd.backend import get_backend
from fem3d.discretisation.mesh import box_mesh
from fem3d.kernels.scatter import ScatterPlan


def pattern():
    """The unknowns of a 3x2x2 box's elements (E, 89): every unknown reached by 1 to 8
    elements; values spread over 16 orders of magnitude, so that the order of the sums shows."""
    dofs = box_mesh(3, 2, 2).dofs()
    values = np.random.default_rng(11).standard_normal(dofs.size) * 10.0 ** np.random.default_rng(12).integers(
        -8, 8, dofs.size
    )
    return dofs, values


def test_plan_sums_like_add_at(backend):
    dofs, values = pattern()
    n = int(dofs.max()) + 3  # unknowns no element reaches stay as they are
    out = np.random.default_rng(13).standard_normal(n)
    ref = out.copy()
    np.add.at(ref, dofs.ravel(), values)
    got = backend.to_numpy(
        ScatterPlan(backend, backend.asarray(dofs)).add(backend.asarray(out), backend.asarray(values))
    )
    assert np.abs(got - ref).max() <= 1e-15 * np.abs(values).max()
    empty = ScatterPlan(backend, backend.asarray(np.zeros(0, dtype=np.int64)))
    assert np.array_equal(backend.to_numpy(empty.add(backend.asarray(out), backend.asarray(np.zeros(0)))), out)


@pytest.mark.gpu
def test_the_gpu_gives_the_numpy_bits_on_every_run():
    """The CUDA sums add each unknown's values in the order NumPy's bincount does: the same
    bits as the CPU, and the same on every run (no atomics)."""
    from gpucfd.backend import cupy_module

    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    gpu, cpu = get_backend("gpu"), get_backend("cpu")
    dofs, values = pattern()
    n = int(dofs.max()) + 1
    ref = ScatterPlan(cpu, dofs).add(np.zeros(n), values)
    plan = ScatterPlan(gpu, gpu.asarray(dofs))
    for _ in range(3):
        assert np.array_equal(plan.add(gpu.xp.zeros(n), gpu.asarray(values)).get(), ref)


def sequential_fold(dofs, values, out, accumulate):
    """Each value added to its target's entry in turn, in index order (the reference of fold)."""
    out = out.copy() if accumulate else np.zeros_like(out)
    for k, target in enumerate(dofs.ravel()):
        out[target] += values[k]
    return out


@pytest.mark.parametrize("accumulate", [False, True])
def test_fold_adds_each_value_in_turn(backend, accumulate):
    """fold: out (or 0) plus each target's values one at a time; entries no index reaches
    keep their value when accumulating and become 0 otherwise; on a GPU bit for bit the
    sequential sum, on the CPU equal to round-off."""
    dofs, values = pattern()
    n = int(dofs.max()) + 3
    out = np.random.default_rng(14).standard_normal(n)
    ref = sequential_fold(dofs, values, out, accumulate)
    for size in (n, None):
        plan = ScatterPlan(backend, backend.asarray(dofs), size)
        got = backend.to_numpy(plan.fold(backend.asarray(out.copy()), backend.asarray(values), accumulate))
        if backend.is_gpu:
            assert np.array_equal(got, ref)
        else:
            assert np.abs(got - ref).max() <= 1e-15 * np.abs(values).max()
    if backend.is_gpu:  # a plan knows whether every entry gets a value (fold then writes them without a fill)
        assert ScatterPlan(backend, backend.asarray(dofs), n - 2).covers
        assert not ScatterPlan(backend, backend.asarray(dofs), n).covers
