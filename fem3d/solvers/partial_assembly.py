"""The operator A (Picard matrix or Newton Jacobian) applied by sum factorisation.

The same operator as the stored element matrices of fem3d.discretisation.assembly, with the
Dirichlet rows of Algorithm 1 and optional row weights, kept as data at the 27 Gauss points
of each element instead (partial assembly, as deal.II MatrixFree or MFEM's PARTIAL level):
a product interpolates the element's unknowns to the points by 1D contractions along each
reference direction (values, first and second derivatives of the quadratic basis, values
and derivatives of the linear one), forms the pointwise terms and tests them back with the
transposed contractions. The row of test node i and velocity component c is

    int N_i v_c + grad N_i . (nu grad u_c - p e_c) + sum_m mask_m(i) (a . grad N_i) tau_m R_c
        [Newton: + sum_m mask_m(i) r_c ((a . grad N_i) dtau_m/da . u + tau_m grad N_i . u)]

with v = a . grad u (+ u . grad a), R = v - nu lap u + grad p the linearised strong momentum
residual, r the strong residual at the iterate, and tau_i = sum_m mask_m(i) tau_m split by
node class: mask_0 = 1 with tau_0 the sum of the end-node terms of the three directions, and
mask_k (k = 1, 2, 3) the middle nodes along direction k with tau_k the middle-node term
minus the end-node term along k (fem3d.discretisation.upwind.tau_by_direction); the row of
pressure node l is int M_l div u. Written against the array module xp: the reference for a
CUDA kernel to come; the solvers do not use it yet.
"""
from __future__ import annotations

import numpy as np

from gpucfd.backend import einsum
from ..discretisation.assembly import laplacian_metric
from ..discretisation.element import Q1, Q2, gauss_legendre
from ..discretisation.geometry import det_and_inverse, jacobians
from ..discretisation.upwind import tau_and_derivative_by_direction, tau_by_direction
from ..kernels.ebe import NL
from ..parallel.partition import Distribution

GRAD = [1, 3, 9]  # first derivatives along xi, eta, zeta among the 27 orders (3 per direction) of _to_points
HESS = [2, 6, 18, 4, 10, 12]  # second derivatives 00, 11, 22, 01, 02, 12
GRAD1 = [1, 2, 4]  # the same among 8 orders (2 per direction): the Q1 table, the test contractions
PACK, SYM = [0, 4, 8, 1, 2, 5], [[0, 3, 4], [3, 1, 5], [4, 5, 2]]  # symmetric (3, 3) <-> packed (00, 11, 22, 01, 02, 12)


def _to_points(xp, v, T):
    """Derivatives at the 3 x 3 x 3 Gauss points of the tensor-product fields v (B, n, n, n, E)
    (nodes along zeta, eta, xi; E elements last), from the 1D tables T (o, 3, n) (order, point,
    node): (o**3, B, Q, E), derivative orders (oz, oy, ox) and points in tensor order. Three
    1D contractions, along xi, eta, zeta."""
    o, _, n = T.shape
    B, E = v.shape[0], v.shape[-1]
    t = T[:, None] @ v.reshape(B * n * n, n, E)  # (ox, B, z, y, qx, E)
    t = T[:, None] @ t.reshape(o * B * n, n, 3 * E)  # (oy, ox, B, z, qy, qx, E)
    t = T[:, None] @ t.reshape(o * o * B, n, 9 * E)  # (oz, oy, ox, B, qz, qy, qx, E)
    return t.reshape(o**3, B, 27, E)


def _to_nodes(xp, g, T):
    """The transpose of :func:`_to_points`: (o**3, B, Q, E) -> (B, n**3, E)."""
    o, _, n = T.shape
    B, E = g.shape[1], g.shape[-1]
    Tt = T.transpose(0, 2, 1)[:, None]  # (o, 1, n, 3)
    t = (Tt @ g.reshape(o, o * o * B, 3, 9 * E)).sum(axis=0)  # (oy, ox, B, c, qy, qx, E)
    t = (Tt @ t.reshape(o, o * B * n, 3, 3 * E)).sum(axis=0)  # (ox, B, c, b, qx, E)
    t = (Tt @ t.reshape(o, B * n * n, 3, E)).sum(axis=0)  # (B, c, b, a, E)
    return t.reshape(B, n**3, E)


def _fields(xp, v):
    """v (E, Q, ...) laid out as stored: (..., Q, E), contiguous."""
    return xp.ascontiguousarray(xp.moveaxis(v, (0, 1), (-1, -2)))


def _laplacian_coefficients(xp, d):
    """(9, Q, E): lap v = sum_o coefficient_o * (derivative GRAD + HESS [o] of v), from the point data d."""
    return xp.concatenate([-d["curv"], d["metric"][:3], 2.0 * d["metric"][3:]])


class PartialAssemblyOperator:
    """A (Picard matrix or Newton Jacobian) on a mesh's unknowns [u | v | w | p] by sum
    factorisation, with the products of fem3d.solvers.operators.ElementOperator (matvec and
    rmatvec, exact transposes of each other).

    dofs  (E, NL) unknown (of this rank's vector) of each local unknown: 27 u, 27 v, 27 w, 8 p,
          nodes in tensor order (fem3d.discretisation.element); kept as local_dofs (NL, E)
    rows  the prescribed rows, fem3d.discretisation.assembly.dirichlet_rows of ``dofs`` (or None)
    dist  fem3d.parallel.partition.Distribution of the n unknowns (default: one process)

    :meth:`linearise` stores float64 arrays (..., Q, E), the Q = 27 Gauss points in tensor
    order and the E elements last: jinv (3, 3) d xi_k / d x_i, wq weight * det J, metric (6)
    sum_i dxi_k/dx_i dxi_l/dx_i packed (00, 11, 22, 01, 02, 12), curv (3) the curvature term of
    the Laplacian in reference components, adv (3) the reference velocity dxi_k/dx_i a_i, tau
    (4) the tau_m above; Newton also grad_a (3, 3) d a_c / d x_d, strong (3) r and dtau (4, 3)
    d tau_m / d a_d. That is 26 x 27 x 8 = 5616 bytes (Picard) or 50 x 27 x 8 = 10800 bytes
    (Newton) per element, besides the NL int32 unknowns (356 bytes), against NL x NL x 8 =
    63368 bytes of a stored float64 element matrix.
    """

    def __init__(self, backend, dofs, n: int, rows=None, dist=None, chunk: int | None = None):
        self.backend = backend
        xp = self.xp = backend.xp
        self.n = int(n)
        self.dist = dist or Distribution.serial(backend, n)
        self.local_dofs = backend.asarray(np.ascontiguousarray(backend.to_numpy(dofs).T), dtype=np.int32)
        self.rows = rows
        x, _ = gauss_legendre(3)
        self.q2 = xp.asarray(Q2.tables_1d(x))  # (3, 3, 3): order, point, node
        self.q1 = xp.asarray(Q1.tables_1d(x)[:2])  # (2, 3, 2)
        mid = (Q2.node_indices == 1).T.astype(np.float64)
        self.classes = xp.asarray(np.concatenate([np.ones((1, 27)), mid]))  # (4, 27): mask_m(i)
        self.data, self.scale, self.nu, self.jacobian = {}, None, None, False
        self.chunk = chunk or (8192 if backend.is_gpu else 128)  # elements per batch: temporaries of about 60 kB each

    @property
    def bytes_per_element(self) -> int:
        """Bytes stored per element: the point data of the last linearisation and the unknowns."""
        return sum(a[..., 0].nbytes for a in self.data.values()) + NL * 4

    def linearise(self, X, u_nodes, re: float, tables, force=None, p_nodes=None, jacobian: bool = False, scale=None):
        """Store the point data of A(a) (Picard), or with ``jacobian`` of J(a, p), for the
        arguments of fem3d.discretisation.assembly.element_matrices_chunk (X (E, g, 3), u_nodes
        (E, 27, 3), p_nodes (E, 8), tables: its ReferenceTables); ``scale`` (n,) or None: the
        row weights D of the operator D A."""
        xp = self.xp
        E = X.shape[0]
        J = jacobians(xp, X, tables.dG)
        det, Jinv = det_and_inverse(xp, J)
        metric, curv = laplacian_metric(xp, X, Jinv, tables)
        U = _to_points(xp, u_nodes.transpose(2, 1, 0).reshape(3, 3, 3, 3, E), self.q2)  # (27, 3, Q, E)
        jinv = _fields(xp, Jinv)
        d = dict(jinv=jinv, wq=_fields(xp, det * tables.w), metric=_fields(xp, metric.reshape(E, 27, 9)[..., PACK]),
                 curv=einsum(xp, "kiqe,iqe->kqe", jinv, _fields(xp, curv)), adv=einsum(xp, "kiqe,iqe->kqe", jinv, U[0]))
        a = U[0].transpose(2, 1, 0)  # (E, Q, 3)
        if jacobian:
            (t_mid, dt_mid), (t_end, dt_end) = tau_and_derivative_by_direction(xp, a, J, re)
            d["dtau"] = _fields(xp, xp.concatenate([dt_end.sum(axis=2)[:, :, None], dt_mid - dt_end], axis=2))
            d["grad_a"] = einsum(xp, "kcqe,kdqe->cdqe", U[GRAD], jinv)
            P = _to_points(xp, p_nodes.T.reshape(1, 2, 2, 2, E), self.q1)[:, 0]  # (8, Q, E)
            r = einsum(xp, "cdqe,dqe->cqe", d["grad_a"], U[0]) + einsum(xp, "kqe,kiqe->iqe", P[GRAD1], jinv)
            r -= einsum(xp, "oqe,ocqe->cqe", _laplacian_coefficients(xp, d), U[GRAD + HESS]) / re
            if force is not None:
                r -= _fields(xp, force(xp, einsum(xp, "qg,egi->eqi", tables.G, X)))
            d["strong"] = r
        else:
            t_mid, t_end = tau_by_direction(xp, a, J, re)
        d["tau"] = _fields(xp, xp.concatenate([t_end.sum(axis=2)[..., None], t_mid - t_end], axis=2))
        self.data, self.scale, self.nu, self.jacobian = d, scale, 1.0 / re, jacobian

    def matvec(self, x, out):
        """out = A x (D A x with row weights)."""
        return self._apply(x, out, False)

    def rmatvec(self, x, out):
        """out = A^T x ((D A)^T x with row weights)."""
        return self._apply(x, out, True)

    def _apply(self, x, out, transpose: bool):
        if transpose and self.scale is not None:
            x = self.scale * x
        local = x[self.local_dofs]  # (NL, E)
        if self.rows is not None:
            e, r, diag = self.rows
            prescribed = diag * local[r, e]
            if transpose:
                local[r, e] = 0.0  # the other entries of a prescribed row are zero
        y = self.xp.empty_like(local)
        E = local.shape[1]
        product = self._transposed_products if transpose else self._element_products
        for s in range(0, E, self.chunk):
            c = slice(s, min(s + self.chunk, E))
            y[:, c] = product(local[:, c], {k: v[..., c] for k, v in self.data.items()})
        if self.rows is not None:
            if transpose:
                y[r, e] += prescribed
            else:
                y[r, e] = prescribed
        out.fill(0)
        self.backend.scatter_add(out, self.local_dofs.ravel(), y.ravel())
        self.dist.sum_interface(out)
        if not transpose and self.scale is not None:
            out *= self.scale
        return out

    def _element_products(self, local, d):
        """A_e x_e (NL, E) of the local vectors ``local`` (NL, E) with point data ``d``, before the prescribed rows."""
        xp, nu = self.xp, self.nu
        E = local.shape[1]
        U = _to_points(xp, local[:81].reshape(3, 3, 3, 3, E), self.q2)  # (27, 3, Q, E)
        P = _to_points(xp, local[81:].reshape(1, 2, 2, 2, E), self.q1)[:, 0]  # (8, Q, E)
        u, g, jinv, wq = U[0], U[GRAD], d["jinv"], d["wq"]  # g (k, c, Q, E): d u_c / d xi_k
        v = einsum(xp, "kqe,kcqe->cqe", d["adv"], g)  # a . grad u_c
        if self.jacobian:
            v += einsum(xp, "cdqe,dqe->cqe", d["grad_a"], u)  # + u . grad a_c
        R = v - nu * einsum(xp, "oqe,ocqe->cqe", _laplacian_coefficients(xp, d), U[GRAD + HESS])
        R += einsum(xp, "kqe,kiqe->iqe", P[GRAD1], jinv)
        s = d["tau"][:, None] * R  # (m, c, Q, E)
        if self.jacobian:
            s += einsum(xp, "mdqe,dqe->mqe", d["dtau"], u)[:, None] * d["strong"]
        flux = d["adv"][:, None, None] * s  # (k, m, c, Q, E): tested with dN_i/dxi_k
        if self.jacobian:
            flux += einsum(xp, "kiqe,iqe->kqe", jinv, u)[:, None, None] * (d["tau"][:, None] * d["strong"])
        flux[:, 0] += nu * einsum(xp, "klqe,lcqe->kcqe", d["metric"][SYM], g) - P[0] * jinv
        test = xp.zeros((8, 4, 3, 27, E))
        test[GRAD1] = flux * wq
        test[0, 0] = v * wq
        nodes = _to_nodes(xp, test.reshape(8, 12, 27, E), self.q2[:2]).reshape(4, 3, 27, E)
        div = einsum(xp, "kcqe,kcqe->qe", g, jinv) * wq
        return xp.concatenate([einsum(xp, "mcne,mn->cne", nodes, self.classes).reshape(81, E),
                               _to_nodes(xp, div[None, None], self.q1[:1])[0]])

    def _transposed_products(self, local, d):
        """A_e^T x_e (NL, E), as :meth:`_element_products` with each step transposed."""
        xp, nu = self.xp, self.nu
        E = local.shape[1]
        masked = self.classes[:, None, :, None] * local[:81].reshape(1, 3, 27, E)  # (m, c, 27, E)
        Z = _to_points(xp, masked.reshape(12, 3, 3, 3, E), self.q2[:2]).reshape(8, 4, 3, 27, E)
        jinv, wq = d["jinv"], d["wq"]
        F = Z[GRAD1] * wq  # (k, m, c, Q, E): the duals of flux
        sd = einsum(xp, "kqe,kmcqe->mcqe", d["adv"], F)  # of s
        Rd = (d["tau"][:, None] * sd).sum(axis=0)  # of R (c, Q, E)
        vd = Z[0, 0] * wq + Rd  # of v
        div = _to_points(xp, local[81:].reshape(1, 2, 2, 2, E), self.q1[:1])[0, 0] * wq  # the dual of div u
        U = xp.zeros((27, 3, 27, E))  # the duals of the derivatives of u at the points
        U[GRAD + HESS] = -nu * _laplacian_coefficients(xp, d)[:, None] * Rd
        U[GRAD] += d["adv"][:, None] * vd + nu * einsum(xp, "klqe,lcqe->kcqe", d["metric"][SYM], F[:, 0]) + div * jinv
        if self.jacobian:
            U[0] = einsum(xp, "cdqe,cqe->dqe", d["grad_a"], vd)
            U[0] += einsum(xp, "mdqe,mqe->dqe", d["dtau"], (d["strong"] * sd).sum(axis=1))
            U[0] += einsum(xp, "kdqe,kqe->dqe", jinv, einsum(xp, "mqe,kmcqe,cqe->kqe", d["tau"], F, d["strong"]))
        P = xp.zeros((8, 1, 27, E))
        P[0, 0] = -einsum(xp, "kcqe,kcqe->qe", F[:, 0], jinv)
        P[GRAD1, 0] = einsum(xp, "kcqe,cqe->kqe", jinv, Rd)
        return xp.concatenate([_to_nodes(xp, U, self.q2).reshape(81, E), _to_nodes(xp, P, self.q1)[0]])
