"""Element matrices of the Picard-linearised steady Navier-Stokes equations.

For frozen velocity a (the previous Picard iterate), Reynolds number Re (nu = 1/Re),
Q2 velocity basis N, Q1 pressure basis M, and the streamline-upwind Petrov-Galerkin
test function W_i = N_i + S_i with S_i = tau_i a . grad N_i (tau from fem3d.upwind),
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
from .kernels.ebe import LD, NL
from .upwind import tau as upwind_tau
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
        host = dict(w=w, N=Q2.values(pts), dN=Q2.gradients(pts), HN=Q2.hessians(pts), M=Q1.values(pts),
                    dM=Q1.gradients(pts), G=geo.values(pts), dG=geo.gradients(pts), HG=geo.hessians(pts))
        return cls(**{k: xp.asarray(v) for k, v in host.items()}, mid=Q2.node_indices == 1)


def quadrature_geometry(xp, X, tables: ReferenceTables):
    """Physical quantities at the Gauss points of elements X (E, g, 3).

    Returns dict: J (E,Q,3,3), wq = det J * weight (E,Q), dN (E,Q,27,3), dM (E,Q,8,3),
    lap (E,Q,27) Laplacian of the Q2 basis (with the curvature term of non-affine maps),
    x (E,Q,3) physical points.
    """
    J = jacobians(xp, X, tables.dG)
    det, Jinv = det_and_inverse(xp, J)  # Jinv[..., k, i] = d xi_k / d x_i
    dN = einsum(xp, "qnk,eqki->eqni", tables.dN, Jinv)
    dM = einsum(xp, "qlk,eqki->eqli", tables.dM, Jinv)
    metric = einsum(xp, "eqki,eqli->eqkl", Jinv, Jinv)
    d2x = einsum(xp, "egc,qgkl->eqckl", X, tables.HG)  # d2 x_c / d xi_k d xi_l
    curv = einsum(xp, "eqckl,eqkl->eqc", d2x, metric)
    lap = einsum(xp, "qnkl,eqkl->eqn", tables.HN, metric) - einsum(xp, "eqnc,eqc->eqn", dN, curv)
    return dict(J=J, wq=det * tables.w, dN=dN, dM=dM, lap=lap, x=einsum(xp, "qg,egi->eqi", tables.G, X))


def element_matrices_chunk(xp, X, u_nodes, re: float, tables: ReferenceTables, force=None, p_nodes=None,
                           jacobian: bool = False, out=None):
    """Element matrices (E, NL, LD), loads (E, NL), residuals (E, NL) and the squared row
    norms of the Picard matrices (E, NL) of one chunk of elements; the matrices are
    written into ``out`` (E, NL, LD) float64 when given (no temporary of their size).

    X (E, g, 3) geometry nodes; u_nodes (E, 27, 3) velocity a about which the equations are
    linearised; p_nodes (E, 8) pressure (or None); force(xp, x) -> (..., 3) body force at
    physical points x (..., 3), or None.

    jacobian=False: the Picard matrices A(a) (convection a . grad u, test functions and tau at a)
    and loads b(a). jacobian=True (needs p_nodes): the Jacobian of the discrete residual
    F(x) = A(x) x - b(x) at x = (a, p), exact with the stabilisation: the velocity blocks
    (c, d) gain the reaction term int W_i N_j da_c/dx_d and the derivative of the test
    functions, int (dS_i/da_d) N_j r_c, with r = (a . grad) a - nu lap a + grad p - f the
    strong momentum residual and dS_i/da_d = (dtau_i/da_d) a . grad N_i + tau_i dN_i/dx_d.
    Residuals: A(a) x_e - b_e with x_e = (a, p) when p_nodes is given, else None. The row
    norms of A(a) weigh the residual alike whichever matrix is returned.
    """
    E = X.shape[0]
    geo = quadrature_geometry(xp, X, tables)
    wq, dN, dM, lap = geo["wq"], geo["dN"], geo["dM"], geo["lap"]
    nu = 1.0 / re
    a = einsum(xp, "qn,eni->eqi", tables.N, u_nodes)
    adv = einsum(xp, "eqi,eqni->eqn", a, dN)  # a . grad N_j
    if jacobian:
        tau, dtau = upwind_tau_and_derivative(xp, a, geo["J"], re, tables.mid)
    else:
        tau = upwind_tau(xp, a, geo["J"], re, tables.mid)
    S = tau * adv
    W = tables.N[None] + S
    wW = (W * wq[..., None]).transpose(0, 2, 1)  # (E, 27, Q)
    wS = (S * wq[..., None]).transpose(0, 2, 1)
    Q = wq.shape[1]
    grad = dN.transpose(0, 2, 1, 3).reshape(E, 27, 3 * Q)
    wgrad = (dN * wq[..., None, None]).transpose(0, 2, 1, 3).reshape(E, 27, 3 * Q)
    K = wW @ adv + nu * (wgrad @ grad.transpose(0, 2, 1)) - nu * (wS @ lap)
    wM = (tables.M[None] * wq[..., None]).transpose(0, 2, 1)  # (E, 8, Q)

    mats = xp.zeros((E, NL, LD), dtype=np.float64) if out is None else out
    if out is not None:
        mats.fill(0.0)
    load = xp.zeros((E, NL), dtype=np.float64)
    f = None if force is None else force(xp, geo["x"])
    for d in range(3):
        rows = slice(27 * d, 27 * d + 27)
        mats[:, rows, rows] = K
        wdN = (dN[..., d] * wq[..., None]).transpose(0, 2, 1)  # (E, 27, Q)
        mats[:, rows, 81:89] = -(wdN @ tables.M) + wS @ dM[..., d]
        mats[:, 81:89, rows] = wM @ dN[..., d]
        if f is not None:
            load[:, rows] = (wW @ f[..., d:d + 1])[..., 0]
    row_sq = einsum(xp, "eij,eij->ei", mats, mats)
    residual = None
    if p_nodes is not None:
        x_e = xp.concatenate([u_nodes.transpose(0, 2, 1).reshape(E, 81), p_nodes], axis=1)
        residual = einsum(xp, "eij,ej->ei", mats[:, :, :NL], x_e) - load
    if jacobian:
        grad_a = einsum(xp, "eqnk,eni->eqik", dN, u_nodes)  # d a_i / d x_k
        strong = (grad_a * a[:, :, None, :]).sum(axis=-1) - nu * einsum(xp, "eqn,eni->eqi", lap, u_nodes)
        strong = strong + einsum(xp, "eqld,el->eqd", dM, p_nodes) - (0.0 if f is None else f)  # r_c, (E, Q, 3)
        dS = dtau * adv[..., None] + tau[..., None] * dN  # dS_i / da_d, (E, Q, 27, 3)
        N = tables.N  # (Q, 27)
        # velocity blocks as (E, c, i, d, j): row 27 c + i, column 27 d + j
        blocks = mats[:, :81, :81].reshape(E, 3, 27, 3, 27)
        react = wW @ (N[None, :, None, :] * grad_a.reshape(E, Q, 9, 1)).reshape(E, Q, 9 * 27)  # (E, i, (c, d, j))
        blocks += react.reshape(E, 27, 3, 3, 27).transpose(0, 2, 1, 3, 4)
        supg = (dS.transpose(0, 2, 3, 1)[:, None] * (wq[..., None] * strong).transpose(0, 2, 1)[:, :, None, None, :])
        blocks += (supg.reshape(-1, Q) @ N).reshape(E, 3, 27, 3, 27)  # (E, c, i, d, q) @ (q, j)
    return mats, load, residual, row_sq


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
