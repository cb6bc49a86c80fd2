"""Per-point quantities of the element matrices by CUDA kernels (quadrature.cu), one thread
per element and quadrature point, for CuPy arrays.

:func:`geometry_cuda` is fem3d.discretisation.assembly.quadrature_geometry and
:func:`tau_cuda` fem3d.discretisation.upwind.tau (and tau_and_derivative) on the GPU. Their
NumPy references are the array code of those functions, which stays in
fem3d.discretisation (the sum-factorised operator uses its parts): the functions there
call these for CuPy arrays, the array code for NumPy ones. Both sides take and return
the same arrays (shapes and layouts below, all float64, C-contiguous).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module

OPTIONS = ("--fmad=false",)  # products and sums rounded one by one, as in NumPy
_THREADS = 128  # THREADS of quadrature.cu


def _module():
    return cuda_module("fem3d.kernels", "quadrature.cu", OPTIONS)


def geometry_cuda(X, w, G, dG, HG, dN, HN, dM) -> dict:
    """The geometry at the Q quadrature points of elements X (E, g, 3), g = 8 or 27, from the
    reference tables w (Q,), G (Q, g), dG (Q, g, 3), HG (Q, g, 3, 3) of the geometry basis and
    dN (Q, 27, 3), HN (Q, 27, 3, 3), dM (Q, 8, 3) of the Q2 and Q1 bases. Returns dict: J
    (E, Q, 3, 3) d x_i / d xi_k at [..., i, k], wq = det J * w (E, Q), dN (E, Q, 27, 3) and
    dM (E, Q, 8, 3) physical gradients, lap (E, Q, 27) the Q2 basis' Laplacian (with the
    curvature term of non-affine maps), x (E, Q, 3) the physical points. One launch of
    quadrature_geometry."""
    import cupy

    X, w, G, dG, HG, dN, HN, dM = (cupy.ascontiguousarray(v, dtype=np.float64) for v in (X, w, G, dG, HG, dN, HN, dM))
    E, g = X.shape[:2]
    Q = w.shape[0]
    out = dict(
        J=cupy.empty((E, Q, 3, 3)),
        wq=cupy.empty((E, Q)),
        dN=cupy.empty((E, Q, 27, 3)),
        dM=cupy.empty((E, Q, 8, 3)),
        lap=cupy.empty((E, Q, 27)),
        x=cupy.empty((E, Q, 3)),
    )
    if E:
        _module().get_function("quadrature_geometry")(
            (-(-E // _THREADS), Q),
            (_THREADS,),
            (
                X,
                np.int32(E),
                np.int32(g),
                np.int32(Q),
                w,
                G,
                dG,
                HG,
                dN,
                HN,
                dM,
                out["J"],
                out["wq"],
                out["dN"],
                out["dM"],
                out["lap"],
                out["x"],
            ),
        )
    return out


def tau_cuda(a, J, re: float, mid_mask, derivative: bool, series_below: float, large: float):
    """tau (E, Q, 27) of the test nodes at the points, and with ``derivative`` also d tau / d a
    (E, Q, 27, 3) (then a pair), from the velocity a (E, Q, 3) and J (E, Q, 3, 3) at the
    points; mid_mask (27, 3) bool host array, True where a node is a middle node along that
    direction; series_below and large: SERIES_BELOW and LARGE of fem3d.discretisation.upwind.
    One launch of upwind_tau or upwind_tau_derivative."""
    import cupy

    a, J = cupy.ascontiguousarray(a, dtype=np.float64), cupy.ascontiguousarray(J, dtype=np.float64)
    mid = np.asarray(mid_mask, dtype=bool)
    if mid.shape != (27, 3):
        raise ValueError(f"mid_mask must have shape (27, 3) (got {mid.shape})")
    bits = [np.uint32((mid[:, k].astype(np.int64) << np.arange(27)).sum()) for k in range(3)]
    E, Q = a.shape[:2]
    tau = cupy.empty((E, Q, 27))
    dtau = cupy.empty((E, Q, 27, 3)) if derivative else None
    points = E * Q
    if points:
        args = (a, J, np.float64(re), np.float64(series_below), np.float64(large), *bits, np.int64(points), tau)
        name = "upwind_tau_derivative" if derivative else "upwind_tau"
        _module().get_function(name)((-(-points // _THREADS),), (_THREADS,), args + ((dtau,) if derivative else ()))
    return (tau, dtau) if derivative else tau
