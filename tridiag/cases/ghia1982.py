"""Reference data of the 2D lid-driven cavity: Ghia, Ghia & Shin (1982).

Files in tridiag/cases/reference_data (see SOURCES.md there): ghia1982_u_vertical_centerline.csv
(Table I, u on x = 0.5), ghia1982_v_horizontal_centerline.csv (Table II, v on y = 0.5) and
ghia1982_primary_vortex.csv (Tables III and V, ψ_min and its centre), at Re 100, 400, 1000;
unit square, lid y = 1 moving +x at speed 1. Ghia's points are nodes k/128 of their 129²
grid, printed to four decimals; they are read back as k/128 exactly.
"""

from __future__ import annotations

import functools
import importlib.resources

import numpy as np

CITATION = "Ghia, Ghia & Shin 1982, J. Comput. Phys. 48:387-411, Tables I-II"
# Points at odds with their own neighbours: Re 400, v at x = 116/128 = 0.9063 reads -0.23827
# between -0.22847 (x = 0.9453) and -0.44993 (x = 0.8594) where a smooth profile passes near
# -0.39; every converged run here gives about -0.388 there (a likely misprint). Reported apart.
SUSPECT = {400: {"v": (116 / 128,)}}


def _table(name: str) -> tuple:
    """(header names, float rows (m, k)) of reference_data/<name>, comment lines skipped."""
    text = importlib.resources.files("tridiag.cases").joinpath("reference_data", name).read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return lines[0].split(","), np.array([[float(v) for v in line.split(",")] for line in lines[1:]])


@functools.cache
def _profiles() -> dict:
    """{"u": (y (17,), {re: u (17,)}), "v": (x (17,), {re: v (17,)})}, coordinates snapped to k/128."""
    out = {}
    for key, name in (("u", "ghia1982_u_vertical_centerline.csv"), ("v", "ghia1982_v_horizontal_centerline.csv")):
        header, rows = _table(name)
        coords = np.round(rows[:, 0] * 128) / 128
        out[key] = (coords, {int(h.split("_re")[1]): rows[:, c] for c, h in enumerate(header) if c})
    return out


@functools.cache
def primary_vortex() -> dict:
    """{re: (ψ_min, x, y)} of Ghia's primary vortex."""
    _, rows = _table("ghia1982_primary_vortex.csv")
    return {int(r[0]): (float(r[1]), float(r[2]), float(r[3])) for r in rows}


def reference(re: float):
    """{"u": (y (17,), u (17,)), "v": (x (17,), v (17,)), "suspect": {"u": bool (17,), "v": bool (17,)}}
    at Reynolds number ``re`` (100, 400 or 1000), or None for other Reynolds numbers."""
    profiles = _profiles()
    key = int(re) if float(re).is_integer() else None
    if key not in profiles["u"][1]:
        return None
    suspect = SUSPECT.get(key, {})
    out = {k: (coords, values[key]) for k, (coords, values) in profiles.items()}
    out["suspect"] = {k: np.isin(out[k][0], suspect.get(k, ())) for k in ("u", "v")}
    return out
