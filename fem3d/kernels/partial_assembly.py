"""Element products of the Q2-Q1 SUPG Navier-Stokes operator by sum factorisation
(fem3d.solvers.partial_assembly): out += sum_e C_e^T A_e C_e x, or with A_e^T, A_e the
element's Picard matrix or Newton Jacobian with the prescribed rows of Algorithm 1.

points      :class:`PointData`: the fields of :data:`FIELDS` (F = 26 Picard, 50 Newton)
            stacked along the first axis (the first EXACT in float64, the others float32 or
            float64), Q = 27 Gauss points in tensor order, elements last, padded to ld, a
            multiple of :data:`ELEMENTS_PER_BLOCK`; the products compute in float64 from them
tables      (39,) float64 the 1D tables at the 3 Gauss points: Q2 (3, 3, 3) [order: value,
            first, second derivative][point][node], then Q1 (2, 3, 2) (fem3d.solvers.partial_assembly.tables)
dofs        (E, NL) int32 unknown of each local unknown (27 u, 27 v, 27 w, 8 p; nodes in
            tensor order)
pres        (n,) float64 1/S_k at prescribed unknown k, 0 at free ones: a prescribed
            unknown's row is 1/S_k x_k in every element (fem3d.discretisation.assembly.
            dirichlet_rows)
nu          the viscosity 1/Re; sigma: a time step's coefficient of the new velocity (the
            reaction sigma u in v below; 0 for a steady flow); ``jacobian``: Newton (else
            Picard); ``transpose``: A_e^T
x, out      (n,) float64, distinct arrays; the products are added into out
colour_offsets  host sequence: colour c is elements colour_offsets[c]:colour_offsets[c+1],
            no two of which share an unknown (fem3d.discretisation.mesh.HexMesh)

:func:`products_numpy` is the reference (colours unused: bincount sums race-free);
:func:`products_cuda` runs partial_assembly.cu, one launch per colour, with the gather of
x, the prescribed rows and the scatter-add (a plain read-add-write, race-free within a
colour, so the sums are the same bits in every run) inside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucfd.backend import cuda_module, einsum

GRAD = [1, 3, 9]  # first derivatives along xi, eta, zeta among the 27 orders (3 per direction) of to_points
HESS = [2, 6, 18, 4, 10, 12]  # second derivatives 00, 11, 22, 01, 02, 12
GRAD1 = [1, 2, 4]  # the same among 8 orders (2 per direction): the Q1 table, the test contractions
PACK, SYM = (
    [0, 4, 8, 1, 2, 5],
    [[0, 3, 4], [3, 1, 5], [4, 5, 2]],
)  # symmetric (3, 3) <-> packed (00, 11, 22, 01, 02, 12)
PICARD = (("jinv", (3, 3)), ("wq", ()), ("metric", (6,)), ("curv", (3,)), ("adv", (3,)), ("tau", (4,)))
NEWTON = PICARD + (("grad_a", (3, 3)), ("strong", (3,)), ("dtau", (4, 3)))
FIELDS = {False: PICARD, True: NEWTON}  # by ``jacobian``; the offsets F_* in partial_assembly.cu follow this order
ELEMENTS_PER_BLOCK = 8  # EB of partial_assembly.cu
_ALONG = np.stack(
    [np.arange(27) % 3, np.arange(27) // 3 % 3, np.arange(27) // 9]
)  # (3, 27) node index along xi, eta, zeta
CLASSES = np.concatenate(
    [np.ones((1, 27)), _ALONG == 1]
)  # (4, 27) mask_m(i): all nodes, the middle ones along xi, eta, zeta


def split_tables(t):
    """The Q2 (3, 3, 3) and Q1 (2, 3, 2) tables of fem3d.solvers.partial_assembly.tables (views)."""
    return t[:27].reshape(3, 3, 3), t[27:].reshape(2, 3, 2)


def to_points(v, T):
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


def to_nodes(g, T):
    """The transpose of :func:`to_points`: (o**3, B, Q, E) -> (B, n**3, E)."""
    o, _, n = T.shape
    B, E = g.shape[1], g.shape[-1]
    Tt = T.transpose(0, 2, 1)[:, None]  # (o, 1, n, 3)
    t = (Tt @ g.reshape(o, o * o * B, 3, 9 * E)).sum(axis=0)  # (oy, ox, B, c, qy, qx, E)
    t = (Tt @ t.reshape(o, o * B * n, 3, 3 * E)).sum(axis=0)  # (ox, B, c, b, qx, E)
    t = (Tt @ t.reshape(o, B * n * n, 3, E)).sum(axis=0)  # (B, c, b, a, E)
    return t.reshape(B, n**3, E)


def laplacian_coefficients(xp, d):
    """(9, Q, E): lap v = sum_o coefficient_o * (derivative GRAD + HESS [o] of v), from the point data d."""
    return xp.concatenate([-d["curv"], d["metric"][:3], 2.0 * d["metric"][3:]])


EXACT = 10  # the first fields (jinv, wq: the pressure's gradient and the divergence take only them) stay float64
# in any storage, so that rounding the others leaves an enclosed flow's constant pressure an exact null vector


@dataclass
class PointData:
    """The point data of E elements in one buffer: ``exact`` (EXACT, Q, ld) float64, the
    first EXACT numbers of :data:`FIELDS` per point, and ``rounded`` (F - EXACT, Q, ld) of the
    storage's dtype (float32 or float64), the others; ld E padded to a multiple of
    ELEMENTS_PER_BLOCK. F is the Newton Jacobian's count (the Picard matrix's fields are its
    first ones: one buffer serves both)."""

    exact: object
    rounded: object

    @property
    def ld(self) -> int:
        return self.exact.shape[2]

    @property
    def bytes_per_element(self) -> int:
        return (self.exact.shape[0] * 8 + self.rounded.shape[0] * self.rounded.itemsize) * 27


def allocate(xp, E: int, dtype=np.float64) -> PointData:
    """Zeroed PointData of E elements, the rounded fields of ``dtype``."""
    ld = -(-E // ELEMENTS_PER_BLOCK) * ELEMENTS_PER_BLOCK
    dtype = np.dtype(dtype)
    fields = sum(int(np.prod(shape)) for _, shape in NEWTON)
    head = EXACT * 27 * ld * 8
    buffer = xp.zeros(head + (fields - EXACT) * 27 * ld * dtype.itemsize, dtype=np.uint8)
    return PointData(
        buffer[:head].view(np.float64).reshape(EXACT, 27, ld),
        buffer[head:].view(dtype).reshape(fields - EXACT, 27, ld),
    )


def unpack(points: PointData, E: int, jacobian: bool) -> dict:
    """The fields of ``points`` as views (name: (*shape, Q, E))."""
    views, offset = {}, 0
    for name, shape in FIELDS[jacobian]:
        size = int(np.prod(shape))
        array, at = (points.exact, offset) if offset < EXACT else (points.rounded, offset - EXACT)
        views[name] = array[at : at + size, :, :E].reshape(shape + (27, E))
        offset += size
    return views


def element_products(local, d, T2, T1, nu: float, jacobian: bool, sigma: float = 0.0):
    """A_e x_e (NL, E) of the local vectors ``local`` (NL, E) with point data ``d`` (views as
    :func:`unpack`), before the prescribed rows. The row of test node i and velocity
    component c is the momentum row of fem3d.solvers.partial_assembly."""
    xp = np
    E = local.shape[1]
    U = to_points(local[:81].reshape(3, 3, 3, 3, E), T2)  # (27, 3, Q, E)
    P = to_points(local[81:].reshape(1, 2, 2, 2, E), T1)[:, 0]  # (8, Q, E)
    u, g, jinv, wq = U[0], U[GRAD], d["jinv"], d["wq"]  # g (k, c, Q, E): d u_c / d xi_k
    v = einsum(xp, "kqe,kcqe->cqe", d["adv"], g)  # a . grad u_c
    if jacobian:
        v += einsum(xp, "cdqe,dqe->cqe", d["grad_a"], u)  # + u . grad a_c
    if sigma:
        v += sigma * u
    R = v - nu * einsum(xp, "oqe,ocqe->cqe", laplacian_coefficients(xp, d), U[GRAD + HESS])
    R += einsum(xp, "kqe,kiqe->iqe", P[GRAD1], jinv)
    s = d["tau"][:, None] * R  # (m, c, Q, E)
    if jacobian:
        s += einsum(xp, "mdqe,dqe->mqe", d["dtau"], u)[:, None] * d["strong"]
    flux = d["adv"][:, None, None] * s  # (k, m, c, Q, E): tested with dN_i/dxi_k
    if jacobian:
        flux += einsum(xp, "kiqe,iqe->kqe", jinv, u)[:, None, None] * (d["tau"][:, None] * d["strong"])
    flux[:, 0] += nu * einsum(xp, "klqe,lcqe->kcqe", d["metric"][SYM], g) - P[0] * jinv
    test = xp.zeros((8, 4, 3, 27, E))
    test[GRAD1] = flux * wq
    test[0, 0] = v * wq
    nodes = to_nodes(test.reshape(8, 12, 27, E), T2[:2]).reshape(4, 3, 27, E)
    div = einsum(xp, "kcqe,kcqe->qe", g, jinv) * wq
    return xp.concatenate(
        [einsum(xp, "mcne,mn->cne", nodes, CLASSES).reshape(81, E), to_nodes(div[None, None], T1[:1])[0]]
    )


def transposed_products(local, d, T2, T1, nu: float, jacobian: bool, sigma: float = 0.0):
    """A_e^T x_e (NL, E), as :func:`element_products` with each step transposed."""
    xp = np
    E = local.shape[1]
    masked = CLASSES[:, None, :, None] * local[:81].reshape(1, 3, 27, E)  # (m, c, 27, E)
    Z = to_points(masked.reshape(12, 3, 3, 3, E), T2[:2]).reshape(8, 4, 3, 27, E)
    jinv, wq = d["jinv"], d["wq"]
    F = Z[GRAD1] * wq  # (k, m, c, Q, E): the duals of flux
    sd = einsum(xp, "kqe,kmcqe->mcqe", d["adv"], F)  # of s
    Rd = (d["tau"][:, None] * sd).sum(axis=0)  # of R (c, Q, E)
    vd = Z[0, 0] * wq + Rd  # of v
    div = to_points(local[81:].reshape(1, 2, 2, 2, E), T1[:1])[0, 0] * wq  # the dual of div u
    U = xp.zeros((27, 3, 27, E))  # the duals of the derivatives of u at the points
    U[GRAD + HESS] = -nu * laplacian_coefficients(xp, d)[:, None] * Rd
    U[GRAD] += d["adv"][:, None] * vd + nu * einsum(xp, "klqe,lcqe->kcqe", d["metric"][SYM], F[:, 0]) + div * jinv
    if jacobian:
        U[0] = einsum(xp, "cdqe,cqe->dqe", d["grad_a"], vd)
        U[0] += einsum(xp, "mdqe,mqe->dqe", d["dtau"], (d["strong"] * sd).sum(axis=1))
        U[0] += einsum(xp, "kdqe,kqe->dqe", jinv, einsum(xp, "mqe,kmcqe,cqe->kqe", d["tau"], F, d["strong"]))
    if sigma:
        U[0] += sigma * vd
    P = xp.zeros((8, 1, 27, E))
    P[0, 0] = -einsum(xp, "kcqe,kcqe->qe", F[:, 0], jinv)
    P[GRAD1, 0] = einsum(xp, "kcqe,cqe->kqe", jinv, Rd)
    return xp.concatenate([to_nodes(U, T2).reshape(81, E), to_nodes(P, T1)[0]])


def products_numpy(
    points,
    tables,
    dofs,
    pres,
    nu: float,
    jacobian: bool,
    transpose: bool,
    x,
    out,
    colour_offsets=None,
    chunk: int = 128,
    sigma: float = 0.0,
):
    """NumPy reference, ``chunk`` elements at a time (temporaries of about 70 kB each per
    element); ``colour_offsets`` unused (bincount adds race-free in a fixed order)."""
    E = dofs.shape[0]
    d = unpack(points, E, jacobian)
    T2, T1 = split_tables(tables)
    product = transposed_products if transpose else element_products
    local, diag = x[dofs.T], pres[dofs.T]  # (NL, E)
    fixed = diag != 0.0
    prescribed = diag * local
    if transpose:
        local[fixed] = 0.0  # the other entries of a prescribed row are zero
    y = np.empty_like(local)
    for s in range(0, E, chunk):
        c = slice(s, min(s + chunk, E))
        at = {k: v[..., c].astype(np.float64, copy=False) for k, v in d.items()}  # the kernel's arithmetic
        y[:, c] = product(local[:, c], at, T2, T1, nu, jacobian, sigma)
    y = y + prescribed if transpose else np.where(fixed, prescribed, y)
    out += np.bincount(dofs.T.ravel(), weights=y.ravel(), minlength=out.size)


def products_cuda(
    points,
    tables,
    dofs,
    pres,
    nu: float,
    jacobian: bool,
    transpose: bool,
    x,
    out,
    colour_offsets,
    chunk: int = 0,
    sigma: float = 0.0,
):
    """CuPy: one launch per colour of pa_picard, pa_newton, pa_picard_t or pa_newton_t
    (partial_assembly.cu) over the colour's elements, ELEMENTS_PER_BLOCK of them per block
    of 8 x 27 threads (``chunk`` unused), compiled for the rounded points' type."""
    name = ("pa_newton" if jacobian else "pa_picard") + ("_t" if transpose else "")
    point = "float" if points.rounded.dtype == np.float32 else "double"
    options = (f"-DEB={ELEMENTS_PER_BLOCK}", f"-DPOINT={point}", f"-DF_ROUNDED={EXACT}")
    kernel = cuda_module("fem3d.kernels", "partial_assembly.cu", options).get_function(name)
    ld = np.int32(points.ld)
    for c in range(len(colour_offsets) - 1):
        e0, e1 = int(colour_offsets[c]), int(colour_offsets[c + 1])
        if e1 > e0:
            kernel(
                (-(-(e1 - e0) // ELEMENTS_PER_BLOCK),),
                (ELEMENTS_PER_BLOCK, 27),
                (
                    points.exact,
                    points.rounded,
                    ld,
                    dofs,
                    np.int32(e0),
                    np.int32(e1 - e0),
                    tables,
                    pres,
                    x,
                    out,
                    np.float64(nu),
                    np.float64(sigma),
                ),
            )


def for_backend(backend):
    """The implementation for ``backend``."""
    return products_cuda if backend.is_gpu else products_numpy
