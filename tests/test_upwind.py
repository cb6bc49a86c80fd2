import numpy as np
import pytest

from fem3d.discretisation.element import Q2, gauss_legendre
from fem3d.discretisation.upwind import SERIES_BELOW, delta_end, delta_mid, tau


def solve_1d(pe: float, n_elem: int = 5, upwind: bool = True):
    """1D quadratic Petrov-Galerkin solution of a u' - nu u'' = 0, u(0) = 0, u(1) = 1,
    weights N_i + tau_i a N_i' with the residual's -nu u'' term (consistent form)."""
    a, h = 1.0, 1.0 / n_elem
    nu = a * h / (2 * pe)
    x, w = gauss_legendre(3)
    t = x  # reference coordinate in [-1, 1]
    N = np.stack([t * (t - 1) / 2, 1 - t * t, t * (t + 1) / 2], axis=1)
    dN = np.stack([t - 0.5, -2 * t, t + 0.5], axis=1) * (2 / h)
    d2N = np.array([1.0, -2.0, 1.0]) * (2 / h) ** 2
    taus = (
        np.array([delta_end(np, np.array(pe)), delta_mid(np, np.array(pe)), delta_end(np, np.array(pe))])
        * h
        / (2 * a)
        * upwind
    )
    n = 2 * n_elem + 1
    A = np.zeros((n, n))
    for e in range(n_elem):
        idx = [2 * e, 2 * e + 1, 2 * e + 2]
        for i in range(3):
            W = N[:, i] + taus[i] * a * dN[:, i]
            for j in range(3):
                integrand = W * a * dN[:, j] + nu * dN[:, i] * dN[:, j] - taus[i] * a * dN[:, i] * nu * d2N[j]
                A[idx[i], idx[j]] += (w * integrand).sum() * h / 2
    b = np.zeros(n)
    A[0], A[-1] = 0, 0
    A[0, 0] = A[-1, -1] = 1
    b[-1] = 1
    xs = np.linspace(0, 1, n)
    exact = np.expm1(a * xs / nu) / np.expm1(a / nu)
    return np.linalg.solve(A, b), exact


@pytest.mark.parametrize("pe", [0.05, 0.3, 1.0, 4.0, 25.0])
def test_coefficients_make_1d_quadratic_element_nodally_exact(pe):
    u, exact = solve_1d(pe)
    assert np.abs(u - exact).max() < 1e-11


def test_galerkin_is_not_nodally_exact():
    """Control: without the upwind weights the same element is far from nodally exact."""
    u, exact = solve_1d(4.0, upwind=False)
    assert np.abs(u - exact).max() > 1e-2


# (Pe, delta_mid, delta_end) from the closed forms in 30-digit arithmetic (mpmath),
# on both sides of the switch between series and closed form.
REFERENCE = [
    (0.01, 0.00083333194444775131, 0.00083333402773272299),
    (0.1, 0.008331944775049624, 0.0083340232864247559),
    (0.149, 0.01241207472027241, 0.01241893099606155),
    (0.151, 0.012578554051455125, 0.012585689155570962),
    (0.2, 0.016655566126994805, 0.016672079852060473),
    (0.5, 0.041494082536798284, 0.041740430427556225),
    (2.0, 0.15651764274966565, 0.16600225968240794),
    (10.0, 0.40004540199100969, 0.56255604321960421),
]


def test_coefficients_match_high_precision_values():
    pe, mid, end = (np.array(c) for c in zip(*REFERENCE))
    assert SERIES_BELOW > 0.149 and SERIES_BELOW < 0.151
    assert np.allclose(delta_mid(np, pe), mid, rtol=1e-12, atol=0)
    assert np.allclose(delta_end(np, pe), end, rtol=1e-12, atol=0)


def test_limits():
    assert np.isclose(delta_mid(np, np.array(1e4)), 0.5, atol=1e-3)
    assert np.isclose(delta_end(np, np.array(1e4)), 1.0, atol=1e-3)
    small = np.array([1e-8, 1e-3])
    assert np.allclose(delta_mid(np, small), small / 12, rtol=1e-6)
    assert np.allclose(delta_end(np, small), small / 12, rtol=1e-6)
    assert np.all(np.isfinite(delta_end(np, np.array([0.0, 800.0, 1e6]))))


def test_tau_on_a_box_element_uses_nodal_classes():
    h = np.array([0.2, 0.1, 0.4])
    J = np.diag(h / 2)[None, None]  # one element, one point
    a = np.array([[[2.0, 0.0, 0.0]]])
    re = 50.0
    t = tau(np, a, J, re, Q2.node_indices == 1)[0, 0]
    pe = 0.5 * re * 2.0 * h[0]
    mid_x = Q2.node_indices[:, 0] == 1
    expect = np.where(mid_x, delta_mid(np, np.array(pe)), delta_end(np, np.array(pe))) * h[0] / (2 * 2.0)
    assert np.allclose(t, expect, rtol=1e-14)
    assert np.all(tau(np, np.zeros_like(a), J, re, Q2.node_indices == 1) == 0)
