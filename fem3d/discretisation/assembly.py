"""Element matrices of the Picard-linearised steady Navier-Stokes equations.

For frozen velocity a (the previous Picard iterate), Reynolds number Re (nu = 1/Re),
Q2 velocity basis N, Q1 pressure basis M, and the streamline-upwind Petrov-Galerkin
test function W_i = N_i + S_i with S_i = tau_i a . grad N_i (tau from fem3d.discretisation.upwind),
the element matrix (local order 27 u, 27 v, 27 w, 8 p) is

    [ K  0  0  G_x ]      K_ij   = int W_i a.grad N_j + nu grad N_i . grad N_j - nu S_i lap N_j
    [ 0  K  0  G_y ]      G_d,il = int -M_l dN_i/dx_d + S_i dM_l/dx_d
    [ 0  0  K  G_z ]      D_d,lj = int M_l dN_j/dx_d
    [ D_x D_y D_z 0 ]     F_d,i  = int W_i f_d

The Galerkin part is the paper's matrix (Kao & Sheu 2018, section 3, eq. 5). The
streamline part S_i weights the whole momentum residual (convection, viscous and
pressure terms and the body force), so the exact solution satisfies the discrete
equations and stabilisation does not lower the convergence order. Integrals use
the 3x3x3 Gauss rule. Matrices are stored with rows of LD entries (fem3d.kernels.ebe).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucfd.backend import einsum
from .element import Q1, Q2, gauss_hex
from .geometry import det_and_inverse, geometry_element, jacobians
from ..kernels.ebe import LD, NL
from ..kernels.element_assembly import element_matrices_cuda
from ..kernels.quadrature import geometry_cuda
from .upwind import tau as upwind_tau
from .upwind import corner_node, time_limited
from .upwind import tau_and_derivative as upwind_tau_and_derivative


@dataclass
class ReferenceTables:
    """Basis tables at the Gauss points (arrays of one backend).

    w (Q,); N (Q, 27); dN (Q, 27, 3); HN (Q, 27, 3, 3); M (Q, 8); dM (Q, 8, 3);
    G, dG, HG: geometry basis (Q, g), (Q, g, 3), (Q, g, 3, 3); mid (27, 3) bool,
    True where a Q2 node is a middle node along that reference direction.
    """

    w: object
    N: object
    dN: object
    HN: object
    M: object
    dM: object
    G: object
    dG: object
    HG: object
    mid: np.ndarray

    @classmethod
    def build(cls, xp, n_geo: int, n_gauss: int = 3) -> "ReferenceTables":
        pts, w = gauss_hex(n_gauss)
        geo = geometry_element(n_geo)
        host = dict(
            w=w,
            N=Q2.values(pts),
            dN=Q2.gradients(pts),
            HN=Q2.hessians(pts),
            M=Q1.values(pts),
            dM=Q1.gradients(pts),
            G=geo.values(pts),
            dG=geo.gradients(pts),
            HG=geo.hessians(pts),
        )
        return cls(**{k: xp.asarray(v) for k, v in host.items()}, mid=Q2.node_indices == 1)


def quadrature_geometry(xp, X, tables: ReferenceTables):
    """Physical quantities at the Gauss points of elements X (E, g, 3).

    Returns dict: J (E,Q,3,3), wq = det J * weight (E,Q), dN (E,Q,27,3), dM (E,Q,8,3),
    lap (E,Q,27) Laplacian of the Q2 basis (with the curvature term of non-affine maps),
    x (E,Q,3) physical points.

    On CuPy arrays one CUDA kernel (fem3d.kernels.quadrature.geometry_cuda); the array code
    below, used for NumPy, is its reference.
    """
    if xp is not np:
        return geometry_cuda(X, tables.w, tables.G, tables.dG, tables.HG, tables.dN, tables.HN, tables.dM)
    J = jacobians(xp, X, tables.dG)
    det, Jinv = det_and_inverse(xp, J)  # Jinv[..., k, i] = d xi_k / d x_i
    dN = einsum(xp, "qnk,eqki->eqni", tables.dN, Jinv)
    dM = einsum(xp, "qlk,eqki->eqli", tables.dM, Jinv)
    metric, curv = laplacian_metric(xp, X, Jinv, tables)
    lap = einsum(xp, "qnkl,eqkl->eqn", tables.HN, metric) - einsum(xp, "eqnc,eqc->eqn", dN, curv)
    return dict(J=J, wq=det * tables.w, dN=dN, dM=dM, lap=lap, x=einsum(xp, "qg,egi->eqi", tables.G, X))


def laplacian_metric(xp, X, Jinv, tables: ReferenceTables):
    """The Laplacian of a function v at the Gauss points of elements X (E, g, 3) with inverse
    Jacobians Jinv: lap v = sum_kl metric_kl d2v/dxi_k dxi_l - curv . grad v. Returns
    metric (E, Q, 3, 3) = sum_i dxi_k/dx_i dxi_l/dx_i and curv (E, Q, 3), the vector
    sum_kl metric_kl d2x/dxi_k dxi_l (zero for affine maps)."""
    metric = einsum(xp, "eqki,eqli->eqkl", Jinv, Jinv)
    d2x = einsum(xp, "egc,qgkl->eqckl", X, tables.HG)  # d2 x_c / d xi_k d xi_l
    return metric, einsum(xp, "eqckl,eqkl->eqc", d2x, metric)


def element_matrices_chunk(
    xp,
    X,
    u_nodes,
    re: float,
    tables: ReferenceTables,
    force=None,
    p_nodes=None,
    jacobian: bool = False,
    out=None,
    matrices: bool = True,
    prescribed=None,
    sigma: float = 0.0,
    history=None,
    tau_sigma: float = 0.0,
    frozen: bool = False,
):
    """Element matrices (E, NL, LD), loads (E, NL), residuals (E, NL) and the squared row
    norms of the Picard matrices (E, NL) of one chunk of elements; the matrices are
    written into ``out`` (E, NL, LD) float64 when given (no temporary of their size), or,
    with ``matrices`` False, not formed (None in their place: the sums cost less).
    ``prescribed`` (dofs (E, NL), fixed (n,) bool, valence (n,)) or None: the rows of
    prescribed unknowns in the matrices are those of :func:`apply_dirichlet_rows`.

    X (E, g, 3) geometry nodes; u_nodes (E, 27, 3) velocity a about which the equations are
    linearised; p_nodes (E, 8) pressure (or None); force(xp, x) -> (..., 3) body force at
    physical points x (..., 3), or None.

    jacobian=False: the Picard matrices A(a) (convection a . grad u, test functions and tau at a)
    and loads b(a). jacobian=True (needs p_nodes): the Jacobian of the discrete residual
    F(x) = A(x) x - b(x) at x = (a, p), exact with the stabilisation: the velocity blocks
    (c, d) gain the reaction term int W_i N_j da_c/dx_d and the derivative of the test
    functions, int (dS_i/da_d) N_j r_c, with r = (a . grad) a - nu lap a + grad p - f the
    strong momentum residual and dS_i/da_d = (dtau_i/da_d) a . grad N_i + tau_i dN_i/dx_d.
    With ``frozen`` as well, the Jacobian with the test functions frozen at a: the reaction
    term alone (the multigrid hierarchy's matrices where lines smooth: fem3d.solvers.multigrid).
    Residuals: A(a) x_e - b_e with x_e = (a, p) when p_nodes is given, else None. The row
    norms of A(a) weigh the residual alike whichever matrix is returned.

    A time step adds the time derivative, approximated as sigma u - h (:func:`point_force`):
    ``sigma`` (1/s, 0 for a steady flow) the scheme's coefficient of the new velocity,
    ``history`` (E, 27, 3) or None the nodal values of h, the scheme's terms of the earlier
    steps. K_ij gains sigma int W_i N_j, the load int W_i h, the strong residual r gains
    sigma a - h; tau has its time limit (fem3d.discretisation.upwind.time_limited) at the time
    scale ``tau_sigma`` (1/s, 0: none): a run's steps keep one, so that the discrete
    equations in space do not change with the length of a step.

    On CuPy arrays the point quantities feed one CUDA kernel
    (fem3d.kernels.element_assembly); the array code below, used for NumPy, is its reference.
    """
    E = X.shape[0]
    geo = quadrature_geometry(xp, X, tables)
    wq, dN, dM, lap = geo["wq"], geo["dN"], geo["dM"], geo["lap"]
    nu = 1.0 / re
    a = einsum(xp, "qn,eni->eqi", tables.N, u_nodes)
    if jacobian and matrices and not frozen:  # d tau / d a enters the Jacobian's matrices alone, not the sums
        tau, dtau = upwind_tau_and_derivative(xp, a, geo["J"], re, tables.mid)
    else:
        tau, dtau = upwind_tau(xp, a, geo["J"], re, tables.mid), None
    if tau_sigma:
        corner = corner_node(tables.mid)
        if dtau is None:
            (tau,), _ = time_limited(xp, tau_sigma, tau[..., corner], [tau])
        else:
            (tau,), (dtau,) = time_limited(xp, tau_sigma, tau[..., corner], [tau], dtau[..., corner, :], [dtau])
    f = point_force(xp, tables, geo["x"], force, history)
    if xp is not np:
        mats = (xp.empty((E, NL, LD), dtype=np.float64) if out is None else out) if matrices else None
        return (
            mats,
            *element_matrices_cuda(
                geo, a, tau, dtau, u_nodes, p_nodes, f, tables.N, tables.M, nu, sigma, mats, prescribed, jacobian
            ),
        )
    adv = einsum(xp, "eqi,eqni->eqn", a, dN)  # a . grad N_j
    S = tau * adv
    wW = ((tables.N[None] + S) * wq[..., None]).transpose(0, 2, 1)  # (E, 27, Q)
    wS = (S * wq[..., None]).transpose(0, 2, 1)
    Q = wq.shape[1]
    grad = dN.transpose(0, 2, 1, 3).reshape(E, 27, 3 * Q)
    wgrad = (dN * wq[..., None, None]).transpose(0, 2, 1, 3).reshape(E, 27, 3 * Q)
    K = wW @ adv + nu * (wgrad @ grad.transpose(0, 2, 1)) - nu * (wS @ lap)  # (E, 27, 27)
    if sigma:
        K += sigma * (wW @ tables.N)
    wM = (tables.M[None] * wq[..., None]).transpose(0, 2, 1)  # (E, 8, Q)
    G = xp.stack(
        [-((dN[..., d] * wq[..., None]).transpose(0, 2, 1) @ tables.M) + wS @ dM[..., d] for d in range(3)], axis=1
    )
    D = xp.stack([wM @ dN[..., d] for d in range(3)], axis=1)  # G (E, 3, 27, 8), D (E, 3, 8, 27)
    load = xp.zeros((E, NL), dtype=np.float64)
    if f is not None:
        load[:, :81] = (wW @ f).transpose(0, 2, 1).reshape(E, 81)
    row_sq = xp.concatenate(
        [((K * K).sum(axis=2)[:, None] + (G * G).sum(axis=3)).reshape(E, 81), (D * D).sum(axis=(1, 3))], axis=1
    )
    residual = None
    if p_nodes is not None:
        momentum = (K @ u_nodes).transpose(0, 2, 1) + (G @ p_nodes[:, None, :, None])[..., 0]  # (E, 3, 27)
        continuity = einsum(xp, "edlj,ejd->el", D, u_nodes)
        residual = xp.concatenate([momentum.reshape(E, 81), continuity], axis=1) - load
    if not matrices:
        return None, load, residual, row_sq

    mats = xp.empty((E, NL, LD), dtype=np.float64) if out is None else out
    velocity = mats[:, :81, :81].reshape(E, 3, 27, 3, 27)  # (E, c, i, d, j): row 27 c + i, column 27 d + j
    if jacobian:
        velocity[...] = newton_terms(
            xp, tables.N, u_nodes, a, adv, tau, dtau, wW, wq, dN, dM, lap, p_nodes, f, nu, sigma
        )
        for d in range(3):
            velocity[:, d, :, d, :] += K
    else:
        velocity[...] = 0.0
        for d in range(3):
            velocity[:, d, :, d, :] = K
    mats[:, :81, 81:NL] = G.reshape(E, 81, 8)
    mats[:, 81:NL, :81] = D.transpose(0, 2, 1, 3).reshape(E, 8, 81)
    mats[:, 81:NL, 81:NL] = 0.0
    if prescribed is not None:
        apply_dirichlet_rows(mats, dirichlet_rows(xp, *prescribed))
    return mats, load, residual, row_sq


def point_force(xp, tables: ReferenceTables, x, force, history):
    """(E, Q, 3) the force and history terms of the momentum equation at the Gauss points x
    (E, Q, 3): force(xp, x) (or None) plus h interpolated from its nodal values ``history``
    (E, 27, 3) (or None); None when both are."""
    f = None if force is None else force(xp, x)
    if history is None:
        return f
    h = einsum(xp, "qn,eni->eqi", tables.N, history)
    return h if f is None else f + h


def newton_terms(xp, N, u_nodes, a, adv, tau, dtau, wW, wq, dN, dM, lap, p_nodes, f, nu, sigma=0.0):
    """The Jacobian's additions to the velocity blocks, (E, c, i, d, j): the reaction term
    int W_i N_j da_c/dx_d plus int (dS_i/da_d) N_j r_c (see :func:`element_matrices_chunk`;
    ``dtau`` None: the reaction term alone, the test functions frozen), as one product of a
    (E, c, i, d, q) table with N (Q, 27). The factors are first laid out with the quadrature
    point last, so that the table is built from contiguous rows."""
    E, Q = wq.shape
    dN_q = _points_last(xp, dN)  # (E, i, d, Q)
    u_t = u_nodes.transpose(0, 2, 1)
    grad_a = (u_t @ dN_q.reshape(E, 27, 3 * Q)).reshape(E, 3, 3, Q)  # d a_c / d x_d, (E, c, d, Q)
    table = xp.empty((E, 3, 27, 3, Q), dtype=np.float64)
    xp.multiply(xp.ascontiguousarray(wW)[:, None, :, None], grad_a[:, :, None], out=table)
    if dtau is None:
        return (table.reshape(-1, Q) @ N).reshape(E, 3, 27, 3, 27)
    strong = (grad_a * _points_last(xp, a)[:, None]).sum(axis=2) - nu * (u_t @ _points_last(xp, lap))
    strong += einsum(xp, "eqld,el->edq", dM, p_nodes) - (0.0 if f is None else _points_last(xp, f))  # r_c, (E, c, Q)
    if sigma:
        strong += sigma * _points_last(xp, a)
    dS = (
        _points_last(xp, dtau) * _points_last(xp, adv)[:, :, None] + _points_last(xp, tau)[:, :, None] * dN_q
    )  # dS_i/da_d
    table += dS[:, None] * (wq[:, None] * strong)[:, :, None, None]
    return (table.reshape(-1, Q) @ N).reshape(E, 3, 27, 3, 27)


def _points_last(xp, v):
    """A contiguous copy of v (E, Q, ...) with the quadrature axis moved last: (E, ..., Q)."""
    return xp.ascontiguousarray(xp.moveaxis(v, 1, -1))


def dirichlet_rows(xp, dofs, fixed, valence) -> tuple:
    """(elements, local rows, diagonal values) of the rows of prescribed unknowns in
    element matrices with unknowns ``dofs`` (E, NL): the arguments of
    :func:`apply_dirichlet_rows`, found once per mesh. fixed (n,) bool; valence (n,)
    element count per unknown."""
    e, r = xp.nonzero(fixed[dofs])
    return e, r, 1.0 / valence[dofs[e, r]]


def apply_dirichlet_rows(mats, rows) -> None:
    """Algorithm 1 of the paper, in place: each row of a prescribed unknown k becomes
    zero with 1/S_k on the diagonal, S_k the number of elements sharing unknown k.

    mats (E, NL, LD); rows: :func:`dirichlet_rows` of the same elements.
    """
    e, r, diag = rows
    mats[e, r, :] = 0.0
    mats[e, r, r] = diag


def row_norms_squared(xp, mats, dofs, n: int):
    """(n,) sum over elements and columns of the squared entries of each global row."""
    return xp.bincount(dofs.ravel(), weights=(mats * mats).sum(axis=2).ravel(), minlength=n)


def scale_rows(mats, dofs, b, scale) -> None:
    """Multiply global row i of A (in its element matrices) and of b (unless None) by
    scale[i], in place.

    With scale = 1 / sqrt(row_norms_squared) (summed over all ranks) this equilibrates
    the rows: the solution of A x = b is unchanged, every row has about unit norm, so
    the prescribed-value rows (diagonal 1/S_k) and the momentum and continuity rows
    (entries of order h and h^2) weigh alike in the least-squares (normal-equations)
    solve, and its residual tolerance means the same on every mesh.
    """
    mats *= scale[dofs][:, :, None]
    if b is not None:
        b *= scale
