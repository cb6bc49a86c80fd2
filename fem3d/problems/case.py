"""A flow described in a TOML case file, the same description as the Python API
(fem3d.problems.flow), run by ``python -m fem3d.run case.toml``.

    [mesh]
    file = "channel_coarse.msh"      # meshio file; relative paths from the case file's folder
    tag_field = "gmsh:physical"      # optional: integer cell data holding the boundary tags
    refine = 1                       # optional: uniform refinements (nested: the multigrid levels)
    [fluid]
    nu = 1e-3                        # or re = 1000 (= 1/nu; density 1)
    [boundary]                       # one condition per boundary tag
    inflow = { velocity = ["16*0.45*y*z*(0.41-y)*(0.41-z)/0.41**4", 0, 0] }
    walls = "wall"                   # also "outflow" and "slip"
    [solver]                         # optional
    solver = "auto"                  # auto, mg, paper
    tol = 1e-8                       # relative residual of the equations
    max_steps = 200
    continuation = "none"            # or Reynolds numbers solved first: "5,10"
    smoothing_steps = 10             # multigrid: GMRES steps of each smoothing (more for long, thin cells)
    [report]                         # optional
    forces = { cylinder = { reference_velocity = 0.2, area = 0.041 } }
    points = { front = [0.45, 0.2, 0.205], back = [0.55, 0.2, 0.205] }
    differences = { delta_p = ["front", "back"] }    # pressure differences of named points
    [output]                         # optional
    dir = "out"
    vtu = true
    pictures = true

Velocity components are numbers or expressions of x, y, z (fem3d.problems.expressions: a
whitelisted grammar, never eval). Unknown sections and keys are input errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from gpucfd.errors import InputError, check_range
from .boundary import condition_from_spec
from ..discretisation.refine import REFINE_MAX
from ..solvers.linear import SOLVERS
from ..solvers.multigrid import SMOOTHING_STEPS

SECTIONS = {
    "mesh": {"file", "tag_field", "refine"},
    "fluid": {"nu", "re"},
    "boundary": None,  # any tag name
    "solver": {"solver", "tol", "max_steps", "continuation", "smoothing_steps"},
    "report": {"forces", "points", "differences"},
    "output": {"dir", "vtu", "pictures"},
}


@dataclass
class Case:
    """A parsed case file (paths resolved, values checked)."""

    path: str
    mesh_file: str
    tag_field: str | None
    nu: float | None
    re: float | None
    boundaries: dict
    refine: int = 0
    solver: str = "auto"
    tol: float = 1e-8
    max_steps: int = 200
    continuation: str = "none"
    smoothing_steps: int = SMOOTHING_STEPS
    forces: dict = field(default_factory=dict)  # tag -> {"reference_velocity": U, "area": A}
    points: dict = field(default_factory=dict)  # name -> [x, y, z]
    differences: dict = field(default_factory=dict)  # name -> [point a, point b]: p(a) - p(b)
    out: str = "out"
    vtu: bool = True
    pictures: bool = True


def read_case(path: str) -> Case:
    """The Case in the TOML file ``path``; InputError naming the file and the key for
    anything missing, unknown or out of range."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    if not os.path.isfile(path):
        raise InputError(f"case file not found: {path}")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a TOML file ({' '.join(str(exc).split())})") from None
    try:
        return _case(path, data)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def _case(path: str, data: dict) -> Case:
    for name, value in data.items():
        if name not in SECTIONS:
            raise InputError(f"unknown section [{name}] (sections: {', '.join(SECTIONS)})")
        if not isinstance(value, dict):
            raise InputError(f"[{name}] must be a table")
        keys = SECTIONS[name]
        extra = sorted(set(value) - keys) if keys is not None else []
        if extra:
            raise InputError(f"unknown key(s) {', '.join(extra)} in [{name}] (keys: {', '.join(sorted(keys))})")
    for name in ("mesh", "fluid", "boundary"):
        if name not in data:
            raise InputError(f"the section [{name}] is missing")
    mesh, fluid, solver = data["mesh"], data["fluid"], data.get("solver", {})
    report, output = data.get("report", {}), data.get("output", {})
    if not isinstance(mesh.get("file"), str):
        raise InputError("[mesh] file must name a mesh file")
    if not isinstance(mesh.get("tag_field", ""), str):
        raise InputError("[mesh] tag_field must name the integer cell data holding the boundary tags")
    if ("nu" in fluid) == ("re" in fluid):
        raise InputError("[fluid] needs nu or re (= 1/nu), one of them")
    for key in ("nu", "re"):
        if key in fluid:
            _number(f"[fluid] {key}", fluid[key], low=1e-5, high=1e5)
    boundaries = {tag: condition_from_spec(tag, spec) for tag, spec in data["boundary"].items()}
    case = Case(
        path=path,
        mesh_file=os.path.join(os.path.dirname(os.path.abspath(path)), mesh["file"]),
        tag_field=mesh.get("tag_field"),
        nu=fluid.get("nu"),
        re=fluid.get("re"),
        boundaries=boundaries,
    )
    if "refine" in mesh:
        case.refine = int(_number("[mesh] refine", mesh["refine"], low=0, high=REFINE_MAX, integer=True))
    if "solver" in solver:
        if solver["solver"] not in SOLVERS:
            raise InputError(f"[solver] solver must be one of {', '.join(SOLVERS)} (got {solver['solver']!r})")
        case.solver = solver["solver"]
    if "tol" in solver:
        case.tol = _number("[solver] tol", solver["tol"], low=0, high=1, open_=True)
    if "max_steps" in solver:
        case.max_steps = int(_number("[solver] max_steps", solver["max_steps"], low=1, high=10000, integer=True))
    if "smoothing_steps" in solver:
        case.smoothing_steps = int(
            _number("[solver] smoothing_steps", solver["smoothing_steps"], low=1, high=20, integer=True)
        )
    if "continuation" in solver:
        if not isinstance(solver["continuation"], str):
            raise InputError('[solver] continuation must be a string: none, auto or Reynolds numbers like "5,10"')
        case.continuation = solver["continuation"]
    case.forces = _forces(report.get("forces", {}))
    case.points = _points(report.get("points", {}))
    case.differences = _differences(report.get("differences", {}), case.points)
    case.out = output.get("dir", "out")
    if not isinstance(case.out, str):
        raise InputError("[output] dir must be a folder name")
    for key in ("vtu", "pictures"):
        if key in output:
            if not isinstance(output[key], bool):
                raise InputError(f"[output] {key} must be true or false")
            setattr(case, key, output[key])
    return case


def _number(name: str, value, low=None, high=None, open_=False, integer=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number (got {value!r})")
    return check_range(name, value, low=low, high=high, low_open=open_, high_open=open_, integer=integer)


def _forces(spec) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] forces must be a table {tag = {reference_velocity = U, area = A}}")
    out = {}
    for tag, scales in spec.items():
        if not isinstance(scales, dict) or set(scales) - {"reference_velocity", "area"}:
            raise InputError(f"[report] forces.{tag} takes reference_velocity and area (or nothing: forces only)")
        out[tag] = {k: _number(f"[report] forces.{tag}.{k}", v, low=0, open_=True) for k, v in scales.items()}
        if len(out[tag]) == 1:
            raise InputError(f"[report] forces.{tag} needs both reference_velocity and area for coefficients")
    return out


def _points(spec) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] points must be a table {name = [x, y, z]}")
    out = {}
    for name, p in spec.items():
        if not isinstance(p, list) or len(p) != 3:
            raise InputError(f"[report] points.{name} must be [x, y, z] (got {p!r})")
        out[name] = [_number(f"[report] points.{name}", v) for v in p]
    return out


def _differences(spec, points: dict) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] differences must be a table {name = [point a, point b]}")
    for name, pair in spec.items():
        if not isinstance(pair, list) or len(pair) != 2 or any(p not in points for p in pair):
            raise InputError(
                f"[report] differences.{name} must name two points of [report] points "
                f"({', '.join(points) or 'none given'}), got {pair!r}"
            )
    return dict(spec)
