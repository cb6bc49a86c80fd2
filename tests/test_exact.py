import numpy as np
import pytest

from fem3d.problems.exact import PaperFlow, TrigFlow

rng = np.random.default_rng(4)


def fd_residual(flow, x, h=1e-5):
    """(u.grad)u - lap(u)/Re + grad p - f and div u by central differences."""
    u = flow.velocity(np, x)
    grad = np.zeros(x.shape[:-1] + (3, 3))
    lap = np.zeros_like(u)
    gp = np.zeros_like(u)
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        up, um = flow.velocity(np, x + e), flow.velocity(np, x - e)
        grad[..., :, j] = (up - um) / (2 * h)
        lap += (up - 2 * u + um) / h**2
        gp[..., j] = (flow.pressure(np, x + e) - flow.pressure(np, x - e)) / (2 * h)
    f = np.zeros_like(u) if flow.force is None else flow.force(np, x)
    momentum = (grad * u[..., None, :]).sum(-1) - lap / flow.re + gp - f
    return momentum, np.trace(grad, axis1=-2, axis2=-1)


@pytest.mark.parametrize("flow", [PaperFlow(100.0), PaperFlow(3.0), TrigFlow(10.0), TrigFlow(250.0)])
def test_exact_solutions_solve_navier_stokes(flow):
    x = rng.uniform(0, 1, (50, 3))
    momentum, div = fd_residual(flow, x)
    scale = 1.0 if flow.force is None else np.abs(flow.force(np, x)).max()
    assert np.abs(momentum).max() < 2e-4 * max(scale, 1.0)
    assert np.abs(div).max() < 1e-8
    if flow.force is not None:  # control: the force of another Re leaves a residual
        assert np.abs(TrigFlow(flow.re * 2).force(np, x) - flow.force(np, x)).max() > 1e-2
