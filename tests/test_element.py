import numpy as np
import pytest

from fem3d.discretisation.element import FACES, Q1, Q2, face_nodes, gauss_hex, gauss_legendre

rng = np.random.default_rng(1)


def paper_q2(xi, node):
    """Kao & Sheu 2018's closed form of the 27-node basis, prod over directions of
    (3/2 t_bar^2 + 1/2 t_bar + 1 - t^2 - t_j^2) with t_bar = t * t_j. (The text of the
    paper as we have it prints "+ t^2"; only "- t^2" gives a Lagrange basis.)"""
    out = 1.0
    for t, tj in zip(xi, node):
        tb = t * tj
        out *= 1.5 * tb * tb + 0.5 * tb + 1.0 - t * t - tj * tj
    return out


@pytest.mark.parametrize("el", [Q1, Q2])
def test_kronecker_delta_and_partition_of_unity(el):
    assert np.allclose(el.values(el.nodes), np.eye(el.n_nodes), atol=1e-14)
    pts = rng.uniform(-1, 1, (20, 3))
    assert np.allclose(el.values(pts).sum(axis=1), 1.0)
    assert np.allclose(el.gradients(pts).sum(axis=1), 0.0, atol=1e-13)
    assert np.allclose(el.hessians(pts).sum(axis=1), 0.0, atol=1e-12)


def test_q2_matches_paper_formula():
    pts = rng.uniform(-1, 1, (15, 3))
    vals = Q2.values(pts)
    ref = np.array([[paper_q2(p, node) for node in Q2.nodes] for p in pts])
    assert np.allclose(vals, ref, atol=1e-14)


def test_q1_matches_paper_formula():
    pts = rng.uniform(-1, 1, (15, 3))
    ref = np.array([[np.prod(1 + p * node) / 8 for node in Q1.nodes] for p in pts])
    assert np.allclose(Q1.values(pts), ref, atol=1e-15)


@pytest.mark.parametrize("el", [Q1, Q2])
def test_derivatives_match_finite_differences(el):
    pts = rng.uniform(-0.9, 0.9, (6, 3))
    h = 1e-6
    g = el.gradients(pts)
    H = el.hessians(pts)
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = (el.values(pts + e) - el.values(pts - e)) / (2 * h)
        assert np.allclose(g[:, :, k], fd, atol=1e-8)
        fdg = (el.gradients(pts + e) - el.gradients(pts - e)) / (2 * h)
        assert np.allclose(H[:, :, :, k], fdg, atol=1e-7)


def test_q2_reproduces_quadratics_exactly():
    def f(p):
        return 1 + p[:, 0] - 2 * p[:, 1] * p[:, 2] + 3 * p[:, 0] ** 2 * p[:, 1] ** 2 * p[:, 2] ** 2

    pts = rng.uniform(-1, 1, (30, 3))
    assert np.allclose(Q2.values(pts) @ f(Q2.nodes), f(pts), atol=1e-13)


def test_gauss_rules_exact_to_degree_2n_minus_1():
    x, w = gauss_legendre(3)
    for d in range(6):
        exact = 0.0 if d % 2 else 2.0 / (d + 1)
        assert np.isclose(w @ x**d, exact, atol=1e-15)
    assert not np.isclose(w @ x**6, 2.0 / 7)
    p, w3 = gauss_hex(3)
    assert p.shape == (27, 3) and np.isclose(w3.sum(), 8.0)
    assert np.isclose(w3 @ (p[:, 0] ** 4 * p[:, 1] ** 2 * p[:, 2] ** 2), (2 / 5) * (2 / 3) ** 2)


def test_face_nodes_lie_on_faces():
    for el in (Q1, Q2):
        fn = face_nodes(el)
        for (axis, side), nodes in zip(FACES, fn):
            assert np.all(el.nodes[nodes, axis] == (1.0 if side else -1.0))
            assert len(nodes) == (el.degree + 1) ** 2
