"""Normal-equations Jacobi-preconditioned conjugate gradients (Kao & Sheu 2018, Algorithm 2).

Solves A^T A x = A^T b, which is symmetric positive (semi)definite for any A, with
the Jacobi preconditioner M = diag(A^T A). The iteration is the Chronopoulos-Gear
form the paper uses: one product with A^T A and one fused reduction of (r, z),
(s, z), (r, r) per iteration, so a distributed run needs one allreduce of three
numbers per iteration (op.dist; owned entries only). (The paper's listing updates r
with beta; the derivation, and this code, use alpha: r_{j+1} = r_j - alpha_j q_j.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .kernels import cg

REASONS = ("converged", "max_iterations", "breakdown", "nan")


@dataclass
class CGInfo:
    """Outcome of a solve.

    iterations   updates of x performed
    reason       one of REASONS
    relres       ||A^T (b - A x)|| / ||A^T b|| of the recursively updated residual at the last check
    true_relres  the same recomputed from x at the end
    residual     ||b - A x|| / ||b|| at the end
    history      (iteration, relres) at each convergence check
    """

    iterations: int
    reason: str
    relres: float
    true_relres: float = math.nan
    residual: float = math.nan
    history: list = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return self.reason == "converged"


def normal_pcg(op, b, x, inv_diag, tol: float = 1e-10, max_iter: int = 10000, check_every: int = 1, progress=None,
               reduction: float = 0.0) -> CGInfo:
    """Solve A^T A x = A^T b in place; ``x`` holds the initial guess.

    op        operator with matvec, rmatvec, normal_matvec (fem3d.operators.ElementOperator)
    inv_diag  1 / diag(A^T A), shape (n,)
    tol       stop when ||A^T (b - A x)|| <= tol ||A^T b||
    reduction or when the residual has fallen by this factor from its initial value
              (inexact Newton/Picard steps; 0: tol alone)
    check_every  read the residual back to the host every this many iterations
    progress  called as progress(iteration, relres) at each check
    """
    xp, dist = op.xp, op.dist
    dots, update = cg.for_backend(op.backend)
    allreduce = None if dist.is_serial else dist.allreduce
    n = b.size
    work = xp.empty(n, dtype=np.float64)
    bt = op.rmatvec(b, xp.empty(n, dtype=np.float64))
    bnorm = dist.norm(bt)
    if not math.isfinite(bnorm):
        return CGInfo(0, "nan", math.nan)
    if bnorm == 0.0:
        x.fill(0.0)
        return CGInfo(0, "converged", 0.0, 0.0, 0.0)
    r = bt - op.normal_matvec(x, xp.empty(n, dtype=np.float64), work)
    z = inv_diag * r
    p = xp.zeros(n, dtype=np.float64)
    q = xp.zeros(n, dtype=np.float64)
    s = xp.empty(n, dtype=np.float64)
    sc = cg.new_scalars(xp)
    history = []
    reason, relres, it, target = "max_iterations", math.nan, 0, tol
    for it in range(max_iter + 1):
        op.normal_matvec(z, s, work)
        dots(r, z, s, dist.weights, sc, allreduce)
        if it % check_every == 0 or it == max_iter:
            rr, flag = (float(v) for v in op.backend.to_numpy(sc[[2, 8]]))
            relres = math.sqrt(rr) / bnorm if rr >= 0 else math.nan
            history.append((it, relres))
            if it == 0:
                target = max(tol, reduction * relres)
            if progress is not None:
                progress(it, relres)
            if not math.isfinite(relres):
                reason = "nan"
                break
            if relres <= target:
                reason = "converged"
                break
            if flag:
                reason = "breakdown"
                break
            if it == max_iter:
                break
        update(x, r, z, p, q, s, inv_diag, sc)
    true_r = bt - op.normal_matvec(x, s, work)
    op.matvec(x, work)
    residual = dist.norm(b - work) / max(dist.norm(b), 1e-300)
    return CGInfo(it, reason, relres, dist.norm(true_r) / bnorm, residual, history)
