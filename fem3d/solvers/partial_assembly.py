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
pressure node l is int M_l div u. The element products are fem3d.kernels.partial_assembly:
a NumPy reference and a CUDA kernel (one launch per colour, so the scatter-add needs no
atomics and a product is the same bits in every run, as the stored operator's); the point
data are computed against the array module xp. NavierStokesSystem builds it for a system's
linearisation with ``assembly="partial"`` (--assembly partial, or auto where the stored
matrices do not fit): then it is the Krylov method's operator.
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import einsum
from ..discretisation.assembly import laplacian_metric, point_force
from ..discretisation.element import Q1, Q2, gauss_legendre
from ..discretisation.geometry import det_and_inverse, jacobians
from ..discretisation.upwind import tau_and_derivative_by_direction, tau_by_direction, time_limited
from ..kernels import partial_assembly as kernels
from ..kernels.ebe import NL
from ..kernels.partial_assembly import GRAD, GRAD1, HESS, PACK, laplacian_coefficients, to_points
from ..parallel.partition import Distribution


def _fields(xp, v):
    """v (E, Q, ...) laid out as stored: (..., Q, E), contiguous."""
    return xp.ascontiguousarray(xp.moveaxis(v, (0, 1), (-1, -2)))


def tables() -> np.ndarray:
    """(39,) the Q2 (3, 3, 3) and Q1 (2, 3, 2) 1D tables at the 3 Gauss points, flattened
    (fem3d.kernels.partial_assembly: order, point, node)."""
    x, _ = gauss_legendre(3)
    return np.concatenate([Q2.tables_1d(x).ravel(), Q1.tables_1d(x)[:2].ravel()])


POINTS = np.float32  # the point data's storage beyond its float64 geometry (kernels.partial_assembly.EXACT): the
# Krylov method's operator to float32's relative 6e-8, far below the Newton steps' linear tolerance, while the
# residuals that decide convergence are float64 element sums
ASSEMBLIES = ("element", "partial")  # a linearisation's products: stored element matrices, or this operator
LINEARISE_CHUNK = 16384  # elements per batch of point data: temporaries of about 20 kB each


class PartialAssemblyOperator:
    """A (Picard matrix or Newton Jacobian) on a mesh's unknowns [u | v | w | p] by sum
    factorisation, with the products of fem3d.solvers.operators.ElementOperator (matvec and
    rmatvec, exact transposes of each other).

    dofs  (E, NL) unknown (of this rank's vector) of each local unknown: 27 u, 27 v, 27 w, 8 p,
          nodes in tensor order (fem3d.discretisation.element); kept as ``dofs`` (int32, the
          caller's device array itself where it is one), which the kernels read
    colour_offsets  colour c is elements colour_offsets[c]:colour_offsets[c+1], no two of
          which share an unknown (mesh.colour_offsets, as for ElementOperator): the CUDA
          products add one colour per launch without atomics. Required also on the CPU,
          whose products do not need it, so that one construction serves both backends
    rows  the prescribed rows, fem3d.discretisation.assembly.dirichlet_rows of ``dofs`` (or None)
    dist  fem3d.parallel.partition.Distribution of the n unknowns (default: one process)

    chunk elements per batch of the NumPy products (default 128)
    points_dtype  of the stored point data beyond its first EXACT fields (default POINTS)

    :meth:`linearise` stores point data (..., Q, E), computed in float64, the Q = 27 Gauss
    points in tensor order and the E elements last, as views (``data``) of ``points``
    (fem3d.kernels.partial_assembly.PointData; ld pads E for aligned loads), kept between
    linearisations: jinv (3, 3) d xi_k / d x_i, wq weight * det J, metric (6)
    sum_i dxi_k/dx_i dxi_l/dx_i packed (00, 11, 22, 01, 02, 12), curv (3) the curvature term of
    the Laplacian in reference components, adv (3) the reference velocity dxi_k/dx_i a_i, tau
    (4) the tau_m above; Newton also grad_a (3, 3) d a_c / d x_d, strong (3) r and dtau (4, 3)
    d tau_m / d a_d, in a fem3d.kernels.partial_assembly.PointData with room for Newton's 50 x 27
    numbers per element (jinv and wq in float64, the others in float32: 6480 bytes; Picard's 26
    fields are its first), besides the NL int32 unknowns (356 bytes),
    against NL x NL x 8 = 63368 bytes of a stored float64 element matrix.
    """

    def __init__(
        self,
        backend,
        dofs,
        colour_offsets,
        n: int,
        rows=None,
        dist=None,
        chunk: int | None = None,
        points_dtype=None,
    ):
        self.backend = backend
        xp = self.xp = backend.xp
        self.n = int(n)
        self.dist = dist or Distribution.serial(backend, n)
        self.dofs = backend.xp.ascontiguousarray(backend.asarray(dofs, dtype=np.int32))  # the kernels read its rows
        self.colour_offsets = [int(v) for v in colour_offsets]
        offsets = np.array(self.colour_offsets)
        if offsets.size < 2 or offsets[0] != 0 or offsets[-1] != dofs.shape[0] or np.any(np.diff(offsets) < 0):
            raise ValueError(
                f"colour_offsets {self.colour_offsets} do not split the {dofs.shape[0]} elements into ranges"
            )
        self.pres = xp.zeros(self.n)  # 1/S_k at prescribed unknowns: the same in every element (dirichlet_rows)
        if rows is not None:
            e, r, diag = rows
            self.pres[self.dofs[e, r]] = diag
        self.tables = xp.asarray(tables())
        self.q2, self.q1 = kernels.split_tables(self.tables)  # (3, 3, 3), (2, 3, 2): order, point, node
        self.products = kernels.for_backend(backend)
        self.points, self.data, self.scale, self.nu, self.jacobian, self.sigma = None, {}, None, None, False, 0.0
        self.chunk = chunk or 128  # elements per NumPy batch
        self.points_dtype = np.dtype(points_dtype or POINTS)

    @property
    def bytes_per_element(self) -> int:
        """Bytes stored per element: the point data (room for the Newton Jacobian's fields, of
        which the Picard matrix uses the first) and the unknowns."""
        return self.points.bytes_per_element + NL * 4

    def linearise(
        self,
        X,
        velocity,
        cells,
        re: float,
        tables,
        force=None,
        p_nodes=None,
        jacobian: bool = False,
        scale=None,
        sigma: float = 0.0,
        history=None,
        tau_sigma: float = 0.0,
    ):
        """Store the point data of A(a) (Picard), or with ``jacobian`` of J(a, p), for the
        arguments of fem3d.discretisation.assembly.element_matrices_chunk (X (E, g, 3), p_nodes
        (E, 8), tables: its ReferenceTables; the velocity at the elements' nodes gathered
        from ``velocity`` (n_nodes, 3) through ``cells`` (E, 27)), LINEARISE_CHUNK elements at
        a time into one array kept between linearisations; ``scale`` (n,) or None: the row
        weights D of the operator D A; ``sigma``, ``history`` (n_nodes, 3) or None and
        ``tau_sigma``: a time step's term, as element_matrices_chunk takes them (history
        gathered as the velocity)."""
        E = X.shape[0]
        if self.points is None:
            self.points = kernels.allocate(self.xp, E, self.points_dtype)
        self.data = kernels.unpack(self.points, E, jacobian)
        for s in range(0, E, LINEARISE_CHUNK):
            c = slice(s, min(s + LINEARISE_CHUNK, E))
            d = self._point_data(
                X[c],
                velocity[cells[c]],
                re,
                tables,
                force,
                None if p_nodes is None else p_nodes[c],
                jacobian,
                sigma,
                None if history is None else history[cells[c]],
                tau_sigma,
            )
            for name, view in self.data.items():
                view[..., c] = d[name]
        self.scale, self.nu, self.jacobian, self.sigma = scale, 1.0 / re, jacobian, sigma

    def _point_data(
        self, X, u_nodes, re: float, tables, force, p_nodes, jacobian: bool, sigma: float, history, tau_sigma: float
    ) -> dict:
        """The fields of :meth:`linearise` (name: (*shape, Q, E)) of the elements X (E, g, 3)."""
        xp = self.xp
        E = X.shape[0]
        J = jacobians(xp, X, tables.dG)
        det, Jinv = det_and_inverse(xp, J)
        metric, curv = laplacian_metric(xp, X, Jinv, tables)
        U = to_points(u_nodes.transpose(2, 1, 0).reshape(3, 3, 3, 3, E), self.q2)  # (27, 3, Q, E)
        jinv = _fields(xp, Jinv)
        d = dict(
            jinv=jinv,
            wq=_fields(xp, det * tables.w),
            metric=_fields(xp, metric.reshape(E, 27, 9)[..., PACK]),
            curv=einsum(xp, "kiqe,iqe->kqe", jinv, _fields(xp, curv)),
            adv=einsum(xp, "kiqe,iqe->kqe", jinv, U[0]),
        )
        a = U[0].transpose(2, 1, 0)  # (E, Q, 3)
        if jacobian:
            (t_mid, dt_mid), (t_end, dt_end) = tau_and_derivative_by_direction(xp, a, J, re)
            d["grad_a"] = einsum(xp, "kcqe,kdqe->cdqe", U[GRAD], jinv)
            P = to_points(p_nodes.T.reshape(1, 2, 2, 2, E), self.q1)[:, 0]  # (8, Q, E)
            r = einsum(xp, "cdqe,dqe->cqe", d["grad_a"], U[0]) + einsum(xp, "kqe,kiqe->iqe", P[GRAD1], jinv)
            r -= einsum(xp, "oqe,ocqe->cqe", laplacian_coefficients(xp, d), U[GRAD + HESS]) / re
            f = point_force(xp, tables, einsum(xp, "qg,egi->eqi", tables.G, X), force, history)
            if f is not None:
                r -= _fields(xp, f)
            if sigma:
                r += sigma * U[0]
            d["strong"] = r
            if tau_sigma:
                (t_mid, t_end), (dt_mid, dt_end) = time_limited(
                    xp, tau_sigma, t_end.sum(axis=2), [t_mid, t_end], dt_end.sum(axis=2), [dt_mid, dt_end]
                )
            d["dtau"] = _fields(xp, xp.concatenate([dt_end.sum(axis=2)[:, :, None], dt_mid - dt_end], axis=2))
        else:
            t_mid, t_end = tau_by_direction(xp, a, J, re)
            if tau_sigma:
                (t_mid, t_end), _ = time_limited(xp, tau_sigma, t_end.sum(axis=2), [t_mid, t_end])
        d["tau"] = _fields(xp, xp.concatenate([t_end.sum(axis=2)[..., None], t_mid - t_end], axis=2))
        return d

    def matvec(self, x, out):
        """out = A x (D A x with row weights)."""
        return self._apply(x, out, False)

    def rmatvec(self, x, out):
        """out = A^T x ((D A)^T x with row weights)."""
        return self._apply(x, out, True)

    def _apply(self, x, out, transpose: bool):
        if transpose and self.scale is not None:
            x = self.scale * x
        out.fill(0)
        self.products(
            self.points,
            self.tables,
            self.dofs,
            self.pres,
            self.nu,
            self.jacobian,
            transpose,
            x,
            out,
            self.colour_offsets,
            self.chunk,
            self.sigma,
        )
        self.dist.sum_interface(out)
        if not transpose and self.scale is not None:
            out *= self.scale
        return out
