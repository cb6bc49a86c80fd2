"""Per-step kernels of the channel flow past the cylinder (channel_flow.cu), each with its
NumPy reference (same signature, any array module with NumPy indexing), so that a whole
time step launches kernels only and can be replayed from a CUDA graph.

Fields (ny, nx) C order. ``table``: tridiag.cases.vorticity.ThomTable. ``faces``: the body's face
samples of tridiag.cases.body_pressure (q (S,) int32 table rows, first and second (S,) int64 flat
fluid nodes along the normal, weight (S,) field dtype). ``gain``, ``count``: one-element
device arrays; ``record`` (capacity, 2).
"""

from __future__ import annotations

import numpy as np

from .build import blocks, kernel

SOURCE = "channel_flow.cu"
OPTIONS = ("--fmad=false",)
THREADS = 256  # BODY_GAIN's shared array is 256 long


def outflow_numpy(psi, omega, c: float) -> None:
    psi[1:-1, -1] = (4 * psi[1:-1, -2] - psi[1:-1, -3]) / 3
    omega[1:-1, -1] = (omega[1:-1, -1] + c * omega[1:-1, -2]) / (1 + c)


def outflow_cuda(psi, omega, c: float) -> None:
    """The outflow column x = L: ψ from ∂ψ/∂x = 0, ω by the implicit upwind convective step (c = U_c Δt / hx)."""
    ny, nx = psi.shape
    kernel(SOURCE, "outflow", psi.dtype, 0, OPTIONS)(
        (blocks(ny - 2, THREADS),), (THREADS,), (psi, omega, np.int32(nx), np.int32(ny), psi.dtype.type(c))
    )


def body_gain_numpy(psi, omega, table, faces, scale: float, gain) -> None:
    p, w = psi.reshape(-1), omega.reshape(-1)
    q = faces["q"]
    own = p[table.node[q]]
    thom = (
        table.coef[q, 0] * (p[table.nbr[q, 0]] - own - table.hspeed[q, 0])
        + table.coef[q, 1] * (p[table.nbr[q, 1]] - own - table.hspeed[q, 1])
    ) / table.count[q]
    gain[0] = scale * (faces["weight"] * (-3 * thom + 4 * w[faces["first"]] - w[faces["second"]])).sum()


def body_gain_cuda(psi, omega, table, faces, scale: float, gain) -> None:
    """gain[0] = scale · Σ_s weight_s (−3 ω_Thom(ψ) + 4 ω₁ − ω₂) over the face samples: the
    surface integral of ∂ω/∂n with the wall vorticity of ψ, scaled."""
    kernel(SOURCE, "body_gain", psi.dtype, 0, OPTIONS)(
        (1,),
        (THREADS,),
        (
            psi,
            omega,
            table.node,
            table.nbr,
            table.coef,
            table.hspeed,
            table.count,
            faces["q"],
            faces["first"],
            faces["second"],
            faces["weight"],
            np.int32(faces["q"].size),
            psi.dtype.type(scale),
            gain,
        ),
    )


def add_scaled_numpy(y, x, gain) -> None:
    y += gain[0] * x


def add_scaled_cuda(y, x, gain) -> None:
    """y += gain[0] x (gain read on the device)."""
    kernel(SOURCE, "add_scaled", y.dtype, 0, OPTIONS)(
        (blocks(y.size, THREADS),), (THREADS,), (y, x, gain, np.int64(y.size))
    )


def probe_numpy(psi, at: int, body: int, half_inv_hx: float, record, count) -> None:
    p, c = psi.reshape(-1), int(count[0])
    record[c, 0] = (p[at - 1] - p[at + 1]) * half_inv_hx
    record[c, 1] = p[body]
    count[0] = c + 1


def probe_cuda(psi, at: int, body: int, half_inv_hx: float, record, count) -> None:
    """Append (v = −∂ψ/∂x at flat node ``at``, ψ at flat node ``body``) to ``record`` at row count[0]."""
    kernel(SOURCE, "probe", psi.dtype, 0, OPTIONS)(
        (1,), (1,), (psi, np.int64(at), np.int64(body), psi.dtype.type(half_inv_hx), record, count)
    )


def for_module(xp) -> dict:
    """{outflow, body_gain, add_scaled, probe}: the NumPy references for NumPy, the kernels for CuPy."""
    cuda = xp is not np
    return {
        "outflow": outflow_cuda if cuda else outflow_numpy,
        "body_gain": body_gain_cuda if cuda else body_gain_numpy,
        "add_scaled": add_scaled_cuda if cuda else add_scaled_numpy,
        "probe": probe_cuda if cuda else probe_numpy,
    }
