"""Element matrices from their per-point quantities by one CUDA kernel (element_assembly.cu),
one thread block per element, for CuPy arrays: the GPU side of
fem3d.discretisation.assembly.element_matrices_chunk, whose array code is the NumPy
reference (the function calls this for CuPy arrays).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module
from .ebe import NL

THREADS = 256  # __launch_bounds__ of element_assembly.cu
_NULL = np.uint64(0)  # a null pointer: an array not given


def shared_doubles(Q: int, newton: bool) -> int:
    """Shared memory of one thread block, in doubles (the layout in element_assembly.cu)."""
    return Q * (1 + 81 + 4 * 27 + 24 + 6) + 81 + 8 + NL + 27 * 27 + 2 * 3 * 27 * 8 + (Q * (9 + 3 + 81) if newton else 0)


def _kernel(shared_bytes: int):
    kernel = cuda_module("fem3d.kernels", "element_assembly.cu").get_function("element_matrices")
    if kernel.max_dynamic_shared_size_bytes < shared_bytes:
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    return kernel


def element_matrices_cuda(
    geo: dict, a, tau, dtau, u_nodes, p_nodes, f, N, M, nu: float, sigma: float, mats, prescribed=None, jacobian=False
):
    """Loads, residuals and squared Picard row norms (E, NL) of E elements, and their matrices
    written into ``mats`` (E, NL, LD) float64 (None: not formed), from the point quantities:
    ``geo`` of fem3d.kernels.quadrature.geometry_cuda (wq, dN, dM, lap), a (E, Q, 3) the
    velocity, tau (E, Q, 27) and dtau (E, Q, 27, 3) or None at the points (matrices: with
    ``jacobian`` the Newton Jacobian's, its test functions frozen where dtau is None;
    without it the Picard matrices),
    u_nodes (E, 27, 3), p_nodes (E, 8) or None (then no residual: None), f (E, Q, 3) or None,
    the tables N (Q, 27) and M (Q, 8), nu = 1 / Re, sigma the time step's coefficient of
    the new velocity (0: steady). ``prescribed`` (dofs (E, NL) int32,
    fixed (n,) bool, valence (n,)) or None: the prescribed rows of the matrices as
    fem3d.discretisation.assembly.apply_dirichlet_rows leaves them. Returns (load, residual, row_sq)."""
    import cupy

    E, Q = geo["wq"].shape

    def c64(v):
        return _NULL if v is None else cupy.ascontiguousarray(v, dtype=np.float64)

    load, row_sq = cupy.empty((E, NL)), cupy.empty((E, NL))
    residual = None if p_nodes is None else cupy.empty((E, NL))
    if mats is not None and (mats.dtype != np.float64 or not mats.flags.c_contiguous):
        raise ValueError("element_matrices_cuda writes float64 C-contiguous matrices")
    dofs, fixed, valence = (None, None, None) if prescribed is None else prescribed
    if E:
        terms = 0 if not jacobian or mats is None else 2 if dtau is not None else 1
        shared = 8 * shared_doubles(Q, terms > 0)
        args = (
            np.int32(Q),
            np.int32(terms),
            np.float64(nu),
            np.float64(sigma),
            *(c64(v) for v in (geo["wq"], geo["dN"], geo["dM"], geo["lap"], a, tau, dtau, u_nodes, p_nodes, f, N, M)),
            _NULL if dofs is None else cupy.ascontiguousarray(dofs, dtype=np.int32),
            _NULL if fixed is None else cupy.ascontiguousarray(fixed, dtype=bool),
            c64(valence),
            _NULL if mats is None else mats,
            np.int32(NL if mats is None else mats.shape[2]),
            load,
            _NULL if residual is None else residual,
            row_sq,
        )
        _kernel(shared)((E,), (THREADS,), args, shared_mem=shared)
    return load, residual, row_sq
