"""Reference hexahedron [-1, 1]^3: Lagrange shape functions and Gauss rules.

Node order is tensor order: node ``a + (p+1)*b + (p+1)**2*c`` sits at
(xi_a, eta_b, zeta_c) with the 1D nodes -1 < ... < 1 of degree p. So the Q2
element (27 velocity nodes) has xi_a in {-1, 0, 1}, node 13 its centre; the Q1
element (8 pressure nodes) has xi_a in {-1, 1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n-point Gauss-Legendre points and weights on [-1, 1] (exact to degree 2n-1)."""
    return np.polynomial.legendre.leggauss(n)


def gauss_hex(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor n x n x n Gauss rule: points (n**3, 3) in tensor order, weights (n**3,)."""
    x, w = gauss_legendre(n)
    idx = np.indices((n, n, n)).reshape(3, -1)  # idx[0] slowest
    points = np.stack([x[idx[2]], x[idx[1]], x[idx[0]]], axis=1)
    weights = w[idx[2]] * w[idx[1]] * w[idx[0]]
    return points, weights


def lagrange_values(nodes: np.ndarray, t, xp=np):
    """Values (t.shape + (len(nodes),)) of the 1D Lagrange basis on ``nodes`` (at least two)
    at the points ``t`` (an array of ``xp``, any shape): for each node the product of
    (t - t_m) over the other nodes m, divided by theirs (t_i - t_m)."""
    out = []
    for i in range(len(nodes)):
        others = [m for m in range(len(nodes)) if m != i]
        value = t - nodes[others[0]]
        for m in others[1:]:
            value = value * (t - nodes[m])
        out.append(value / np.prod([nodes[i] - nodes[m] for m in others]))
    return xp.stack(out, axis=-1)


def _lagrange_1d(nodes: np.ndarray, t: np.ndarray):
    """Values, first and second derivatives of the 1D Lagrange basis on ``nodes`` at ``t``.

    Returns three arrays of shape (len(t), len(nodes)).
    """
    n = len(nodes)
    t = np.asarray(t, dtype=float)[:, None]
    val = lagrange_values(nodes, t[:, 0])
    d1 = np.zeros_like(val)
    d2 = np.zeros_like(val)
    for i in range(n):
        others = [m for m in range(n) if m != i]
        denom = np.prod([nodes[i] - nodes[m] for m in others])
        factors = [(t[:, 0] - nodes[m]) for m in others]
        for j, _ in enumerate(others):
            d1[:, i] += np.prod([f for k, f in enumerate(factors) if k != j], axis=0) / denom
            for k, _ in enumerate(others):
                if k != j:
                    d2[:, i] += np.prod([f for m, f in enumerate(factors) if m not in (j, k)], axis=0) / denom
    return val, d1, d2


@dataclass(frozen=True)
class LagrangeHex:
    """Tensor-product Lagrange element of degree ``degree`` (1: Q1, 8 nodes; 2: Q2, 27 nodes)."""

    degree: int

    @cached_property
    def nodes_1d(self) -> np.ndarray:
        return np.linspace(-1.0, 1.0, self.degree + 1)

    @property
    def n_nodes(self) -> int:
        return (self.degree + 1) ** 3

    @cached_property
    def node_indices(self) -> np.ndarray:
        """(n_nodes, 3) integer 1D node indices (a, b, c) of each node."""
        m = self.degree + 1
        k = np.arange(m**3)
        return np.stack([k % m, (k // m) % m, k // (m * m)], axis=1)

    @cached_property
    def nodes(self) -> np.ndarray:
        """(n_nodes, 3) reference coordinates of the nodes."""
        return self.nodes_1d[self.node_indices]

    def tables_1d(self, t) -> np.ndarray:
        """Values, first and second derivatives of the 1D basis at the points ``t``:
        (3, len(t), degree + 1), [derivative order, point, node]."""
        return np.stack(_lagrange_1d(self.nodes_1d, t))

    def _tables(self, points):
        points = np.atleast_2d(np.asarray(points, dtype=float))
        return [_lagrange_1d(self.nodes_1d, points[:, d]) for d in range(3)], points.shape[0]

    def values(self, points) -> np.ndarray:
        """Shape function values, (n_points, n_nodes)."""
        tabs, _ = self._tables(points)
        a, b, c = self.node_indices.T
        return tabs[0][0][:, a] * tabs[1][0][:, b] * tabs[2][0][:, c]

    def gradients(self, points) -> np.ndarray:
        """Reference gradients dN/dxi_k, (n_points, n_nodes, 3)."""
        tabs, _ = self._tables(points)
        ijk = self.node_indices
        out = []
        for k in range(3):
            term = 1.0
            for d in range(3):
                term = term * tabs[d][1 if d == k else 0][:, ijk[:, d]]
            out.append(term)
        return np.stack(out, axis=-1)

    def hessians(self, points) -> np.ndarray:
        """Reference second derivatives d2N/dxi_k dxi_m, (n_points, n_nodes, 3, 3)."""
        tabs, npts = self._tables(points)
        ijk = self.node_indices
        out = np.empty((npts, self.n_nodes, 3, 3))
        for k in range(3):
            for m in range(3):
                term = 1.0
                for d in range(3):
                    order = (d == k) + (d == m)
                    term = term * tabs[d][order][:, ijk[:, d]]
                out[:, :, k, m] = term
        return out


Q1 = LagrangeHex(1)
Q2 = LagrangeHex(2)

# Local faces of the reference hexahedron: (axis, side) for xi-, xi+, eta-, eta+, zeta-, zeta+.
FACES = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def face_nodes(element: LagrangeHex) -> np.ndarray:
    """(6, (degree+1)**2) local node ids on each face, faces in FACES order."""
    ijk = element.node_indices
    last = element.degree
    return np.array([np.flatnonzero(ijk[:, axis] == (last if side else 0)) for axis, side in FACES])
