"""Krylov solvers behind one interface, in the spirit of MFEM's IterativeSolver and SetPreconditioner.

Operator        ``n``, ``dist`` (fem3d.parallel.partition.Distribution), ``xp`` and ``matvec(x, out)``;
                the normal-equations solver also needs ``rmatvec`` and ``normal_matvec``.
Preconditioner  ``setup(op)`` once per operator, then ``apply(r, out)``: out = M^-1 r.
Solver          ``solve(op, b, x, precond)`` solves op x = b in place (``x`` holds the initial
                guess) and returns a :class:`SolveInfo` with the reason it stopped.

Vectors are complete local vectors of this rank (fem3d.parallel.partition): dot products sum the
owned entries and reduce over the ranks, so the same code runs on one process or many.
``progress(iteration, relres)`` is called at every residual check; it may raise (an
interrupt) to stop the solve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..kernels import cg, hessenberg, vectors

BASIS_START = 2  # FGMRES directions allocated first, doubled as a solve needs more (multigrid: 2-6 per Newton step)
REASONS = ("converged", "max_iterations", "stagnated", "breakdown", "nan")


@dataclass
class SolveInfo:
    """Outcome of a linear solve.

    iterations  Krylov iterations performed
    reason      one of REASONS
    relres      ||b - A x|| / ||b|| at the last check
    history     (iteration, relres) at each check
    """

    iterations: int
    reason: str
    relres: float
    history: list = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return self.reason == "converged"


class Identity:
    """No preconditioning."""

    def setup(self, op) -> None:
        pass

    def apply(self, r, out):
        out[...] = r
        return out


class NormalJacobi:
    """Jacobi preconditioner of the normal equations: M = diag(A^T A) (zero rows left alone)."""

    def setup(self, op) -> None:
        xp = op.xp
        diag = op.normal_diagonal()
        self.inv_diag = xp.where(diag > 0, 1.0 / xp.where(diag > 0, diag, 1.0), 0.0)

    def apply(self, r, out):
        out[...] = self.inv_diag * r
        return out


def _without_iterating(bnorm: float, x) -> SolveInfo:
    """The answer for a right-hand side of norm ``bnorm`` that is not finite (NaN) or zero
    (x = 0, converged)."""
    if not math.isfinite(bnorm):
        return SolveInfo(0, "nan", math.nan)
    x.fill(0.0)
    return SolveInfo(0, "converged", 0.0)


class NormalEquationsCG:
    """Jacobi-preconditioned conjugate gradients on A^T A x = A^T b (Kao & Sheu 2018,
    Algorithm 2) in the Chronopoulos-Gear form: one product with A^T A and one fused
    reduction of (r, z), (s, z), (r, r) per iteration, so a distributed run needs one
    allreduce of three numbers per iteration. (The paper's listing updates r with beta;
    the derivation, and this code, use alpha: r_{j+1} = r_j - alpha_j q_j.) The
    preconditioner must be :class:`NormalJacobi` (its diagonal feeds the fused update).

    CG on the normal equations minimises the true residual ||b - A x|| over its Krylov
    space, and that is what it reports and tests: every ``check_every`` iterations it
    computes b - A x (one more product) and stops once ||b - A x|| <= rtol ||b||, so that
    an inexact Newton step reduces the linearised residual as asked.

    Near round-off the recurrences can lose positivity (a breakdown): the iterate then
    stays as it is until the next check, which restarts CG from the true residual, and
    so does a residual that fell by less than 1 % in STALL_ITERATIONS iterations (the
    recursive residual has drifted from the true one); the same again after a restart
    that did not halve the residual ends the solve ("breakdown" or "stagnated", with
    the iterate it reached).
    """

    STALL_ITERATIONS = 500

    def __init__(self, rtol: float = 1e-10, max_iterations: int = 20000, check_every: int = 10, progress=None):
        self.rtol, self.max_iterations, self.check_every, self.progress = rtol, max_iterations, check_every, progress

    def solve(self, op, b, x, precond: NormalJacobi) -> SolveInfo:
        xp, dist = op.xp, op.dist
        dots, update = cg.for_backend(op.backend)
        allreduce = None if dist.is_serial else dist.allreduce
        n = b.size
        work = xp.empty(n, dtype=np.float64)
        bnorm = dist.norm(b)
        if not math.isfinite(bnorm) or bnorm == 0.0:
            return _without_iterating(bnorm, x)
        inv_diag = precond.inv_diag
        r, z = xp.empty(n, dtype=np.float64), xp.empty(n, dtype=np.float64)
        p, q, s = xp.empty(n, dtype=np.float64), xp.empty(n, dtype=np.float64), xp.empty(n, dtype=np.float64)

        def start():
            op.rmatvec(b - op.matvec(x, work), r)
            xp.multiply(inv_diag, r, out=z)
            p.fill(0.0)
            q.fill(0.0)
            return cg.new_scalars(xp)

        sc = start()
        history = []
        reason, relres, it, restarted_at, restart_it = "max_iterations", math.nan, 0, None, 0
        for it in range(self.max_iterations + 1):
            op.normal_matvec(z, s, work)
            dots(r, z, s, dist.weights, sc, allreduce)
            if it % self.check_every == 0 or it == self.max_iterations:
                flag = float(op.backend.to_numpy(sc[8]))
                relres = dist.norm(b - op.matvec(x, work)) / bnorm
                history.append((it, relres))
                if self.progress is not None:
                    self.progress(it, relres)
                if not math.isfinite(relres) or not math.isfinite(float(op.backend.to_numpy(sc[2]))):
                    reason = "nan"
                    break
                if relres <= self.rtol:
                    reason = "converged"
                    break
                if it == self.max_iterations:
                    break
                if flag or self._stalled(history, it, restart_it):
                    if restarted_at is not None and relres >= 0.5 * restarted_at:
                        reason = "breakdown" if flag else "stagnated"
                        break
                    restarted_at, restart_it = relres, it
                    sc = start()
                    continue
            update(x, r, z, p, q, s, inv_diag, sc)
        return SolveInfo(it, reason, relres, history)

    def _stalled(self, history, it, since):
        """True when the residual fell by less than 1 % over the last STALL_ITERATIONS
        iterations (counted from ``since``, the last restart)."""
        then = it - self.STALL_ITERATIONS
        if then < since:
            return False
        past = [rel for i, rel in history if since <= i <= then]
        return bool(past) and history[-1][1] > 0.99 * past[-1]


def _squared_norm(dist, v):
    """(1,) array on the device: the squared norm of ``v`` over all ranks (no read-back)."""
    return dist.allreduce(vectors.for_backend(dist.backend).multi_dot(dist.owned_part(v)[None], v))


def _arnoldi_step(op, precond, V, j: int, z, column):
    """Step j of flexible Arnoldi: z = M^-1 V[j], then V[j+1] = A z made orthogonal to
    V[:j+1] by classical Gram-Schmidt done twice (each pass one product with the basis and
    one reduction of j+1 numbers) and normalised (left zero when A z lies in the basis).
    Writes H[:j+2, j] into ``column`` (j+2,) on the device (a view of H may be given) and
    returns it: nothing is read back, so the host queues the next kernels while the device
    works."""
    dist, dense = op.dist, vectors.for_backend(op.backend)
    precond.apply(V[j], z)
    w = op.matvec(z, V[j + 1])
    h = dist.allreduce(dense.multi_dot(V[: j + 1], dist.owned_part(w)))
    dense.combine(V[: j + 1], h, w, -1.0)
    h2 = dist.allreduce(dense.multi_dot(V[: j + 1], dist.owned_part(w)))
    dense.combine(V[: j + 1], h2, w, -1.0)
    return dense.normalise(w, w, _squared_norm(dist, w), h, h2, column)


def gmres_steps(op, b, x, precond, steps: int):
    """x + the GMRES correction of ``steps`` steps right-preconditioned by ``precond``, a
    linear operator M^-1 (Arnoldi from the residual b - A x; ``x`` None means zero):
    minimises ||b - A (x + M^-1 V y)|| over the ``steps`` Krylov directions V. A fixed
    number of steps makes it a (nonlinear) smoother for multigrid. The preconditioned
    directions are not kept (a basis of ``steps`` vectors less than flexible GMRES: on the
    finest level of a large mesh, a sixth of the memory at the smoothing's peak): the
    correction takes one application of M^-1 more. The Hessenberg matrix and its
    least-squares problem stay on the device (fem3d.kernels.hessenberg): nothing is read
    back, so a smoothing can be replayed from a CUDA graph. Returns the new x (NaN where a
    coefficient was not finite)."""
    xp, dist = op.xp, op.dist
    dense = vectors.for_backend(op.backend)
    r = b.copy() if x is None else b - op.matvec(x, xp.empty_like(b))
    x = xp.zeros_like(b) if x is None else x
    V = xp.empty((steps + 1, b.size), dtype=np.float64)
    Hd = xp.zeros((steps + 1, steps + 1), dtype=np.float64)  # column ``steps`` holds beta
    dense.normalise(r, V[0], _squared_norm(dist, r), None, None, Hd[:1, steps])
    z = r  # M^-1 V[j] of each step, then the correction: r's memory, no longer needed
    for j in range(steps):
        _arnoldi_step(op, precond, V, j, z, Hd[: j + 2, j])
    direction = V[steps]  # V y, in the last direction's memory (the least-squares problem is in Hd)
    direction.fill(0.0)
    dense.combine(V[:steps], hessenberg.for_backend(op.backend)(Hd), direction)
    x += precond.apply(direction, z)
    return x


def _residual(op, b, x, out):
    """out = b - A x."""
    return op.xp.subtract(b, op.matvec(x, out), out=out)


class FGMRES:
    """Restarted flexible GMRES with right preconditioning (Saad 1993): minimises the true
    residual ||b - A x|| over the preconditioned Krylov space, and the preconditioner may
    change between iterations. Arnoldi by classical Gram-Schmidt done twice (CGS2): each
    pass is one product with the basis and one reduction of j numbers.

    Stops when ||b - A x|| <= rtol ||b|| (checked on the true residual at the end of a
    cycle); "stagnated" when a whole restart cycle reduced the residual by less than 1 %.
    """

    def __init__(self, rtol: float = 1e-2, restart: int = 30, max_iterations: int = 1000, progress=None):
        self.rtol, self.restart, self.max_iterations, self.progress = rtol, restart, max_iterations, progress
        self._basis = None

    def _buffers(self, xp, n: int, columns: int):
        """(V, Z) with room for at least ``columns`` directions (at most the restart length),
        grown by doubling and keeping their contents: the basis of a solve that converges
        in a few iterations holds a few vectors, not the restart length's (at 64^3, 101
        float64 vectors of 6.7 M unknowns: 5.4 GB). Where the memory for a larger basis
        cannot be had (MemoryError, as CuPy's OutOfMemoryError is), the present one comes
        back and the solve restarts when it is full."""
        V, Z = self._basis or (None, None)
        if V is not None and (V.shape[1] != n or not isinstance(V, xp.ndarray)):
            V = Z = None
        if V is not None and V.shape[0] > columns:
            return V, Z
        m = min(self.restart, max(columns, BASIS_START, 2 * (0 if Z is None else Z.shape[0])))
        try:
            grown = (xp.empty((m + 1, n), dtype=np.float64), xp.empty((m, n), dtype=np.float64))
        except MemoryError:
            if V is None:
                raise
            return V, Z
        if V is not None:
            grown[0][: V.shape[0]], grown[1][: Z.shape[0]] = V, Z
        self._basis = grown
        return grown

    def solve(self, op, b, x, precond=None) -> SolveInfo:
        xp, dist = op.xp, op.dist
        precond = precond or Identity()
        V, Z = self._buffers(xp, b.size, 1)
        bnorm = dist.norm(b)
        if not math.isfinite(bnorm) or bnorm == 0.0:
            return _without_iterating(bnorm, x)
        m, history, its = self.restart, [], 0
        beta = dist.norm(_residual(op, b, x, V[0]))  # in the basis's first row, where the cycle starts
        relres = beta / bnorm
        history.append((0, relres))
        while True:
            if not math.isfinite(relres):
                return SolveInfo(its, "nan", relres, history)
            if relres <= self.rtol:
                return SolveInfo(its, "converged", relres, history)
            if its >= self.max_iterations:
                return SolveInfo(its, "max_iterations", relres, history)
            V[0] /= beta
            H = np.zeros((m + 1, m))
            g = np.zeros(m + 1)
            g[0] = beta
            rotations = []
            j, cycle = 0, m
            while j < cycle and its < self.max_iterations:
                V, Z = self._buffers(xp, b.size, j + 1)
                if Z.shape[0] <= j:  # the basis could not grow: this cycle ends here
                    cycle = j
                    break
                H[: j + 2, j] = op.backend.to_numpy(_arnoldi_step(op, precond, V, j, Z[j], xp.empty(j + 2)))
                if not np.all(np.isfinite(H[: j + 2, j])):
                    return SolveInfo(its, "nan", math.nan, history)
                for i, (c, s) in enumerate(rotations):
                    H[i, j], H[i + 1, j] = c * H[i, j] + s * H[i + 1, j], -s * H[i, j] + c * H[i + 1, j]
                d = math.hypot(H[j, j], H[j + 1, j])
                c, s = (H[j, j] / d, H[j + 1, j] / d) if d > 0 else (1.0, 0.0)
                rotations.append((c, s))
                H[j, j], H[j + 1, j] = d, 0.0
                g[j], g[j + 1] = c * g[j], -s * g[j]
                j += 1
                its += 1
                estimate = abs(g[j]) / bnorm
                history.append((its, estimate))
                if self.progress is not None:
                    self.progress(its, estimate)
                if estimate <= self.rtol or d == 0.0:
                    break
            y = np.linalg.solve(np.triu(H[:j, :j]), g[:j]) if j else np.zeros(0)
            vectors.for_backend(op.backend).combine(Z[:j], op.backend.asarray(y), x)
            new = dist.norm(_residual(op, b, x, V[0])) / bnorm
            if new > 0.99 * relres and j == cycle:
                return SolveInfo(its, "stagnated", new, history)
            relres, beta = new, new * bnorm
