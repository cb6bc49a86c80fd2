"""Published centre-line profiles of the 3D lid-driven cube, in our convention, and
the same profiles of a solution compared with them.

Files fem3d/reference_data/cavity3d_<source>_re<Re>_<profile>.csv, profile u_vertical
(columns y, u: u(0.5, y, 0.5)) or v_horizontal (columns x, v: v(x, 0.5, 0.5)), for
the cube [0, 1]^3 with the lid at y = 1 moving in +x at unit speed. Their comment
lines give the citation and how the source's axes were mapped (see SOURCES.md there).
"""

from __future__ import annotations

import importlib.resources
import re as regex

import numpy as np

from ..discretisation.fields import centre_line

NAME = regex.compile(r"cavity3d_(?P<source>.+)_re(?P<re>\d+(?:\.\d+)?)_(?P<profile>u_vertical|v_horizontal)\.csv$")
PROFILES = {"u_vertical": (1, 0), "v_horizontal": (0, 1)}  # profile: (axis along the line, velocity component)
PROFILE_POINTS = 129  # uniform points per profile, besides the reference points


def cavity_references(re: float) -> list[dict]:
    """Reference sets at Reynolds number ``re``: dicts with name, citation, profile,
    coords (m,) and values (m,), sorted by name."""
    out = []
    folder = importlib.resources.files("fem3d").joinpath("reference_data")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        m = NAME.match(entry.name)
        if not m or float(m["re"]) != float(re):
            continue
        text = entry.read_text()
        comments = [line[1:].strip() for line in text.splitlines() if line.startswith("#")]
        rows = [line for line in text.splitlines() if line and not line.startswith("#")]
        data = np.array([[float(v) for v in line.split(",")[:2]] for line in rows[1:]])
        order = np.argsort(data[:, 0])
        out.append(
            {
                "name": f"{m['source']} Re {m['re']}",
                "citation": regex.split(r", Table| \(", comments[0])[0] if comments else m["source"],
                "profile": m["profile"],
                "coords": data[order, 0],
                "values": data[order, 1],
                "file": entry.name,
            }
        )
    return out


def centre_line_profiles(mesh, x, references: list) -> dict:
    """The profiles of the host vector ``x`` (fem3d.discretisation.fields.centre_line) named in PROFILES:
    u along the vertical and v along the horizontal line through the centre of the mesh's
    bounding box, at PROFILE_POINTS uniform points and at every point of ``references``.
    Each also names its velocity ``component``."""
    out = {}
    for name, (axis, component) in PROFILES.items():
        extra = [c for ref in references if ref["profile"] == name for c in ref["coords"]]
        out[name] = {**centre_line(mesh, x, axis, PROFILE_POINTS, extra), "component": component}
    return out


def compare_with_references(profiles: dict, references: list) -> list[dict]:
    """max |difference| of each profile from each reference set at its points, and where."""
    rows = []
    for ref in references:
        prof = profiles[ref["profile"]]
        ours = np.interp(ref["coords"], prof["coords"], prof["velocity"][:, prof["component"]])
        diff = np.abs(ours - ref["values"])
        rows.append(
            {
                "reference": ref["name"],
                "citation": ref["citation"],
                "profile": ref["profile"],
                "points": len(diff),
                "max_abs_diff": float(diff.max()),
                "at": float(ref["coords"][int(np.argmax(diff))]),
            }
        )
    return rows
