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
    [solver]                         # optional: any solver setting of the command line, e.g.
    solver = "auto"                  # auto, mg, paper
    tol = 1e-8                       # relative residual of the equations
    max_steps = 200                  # (python -m fem3d.run --help lists them: --max-steps is max_steps)
    continuation = "none"            # or Reynolds numbers solved first: "5,10"
    sequence = "none"                # mesh sequencing: coarser meshes solved first, "auto" or a count
    smoothing_steps = 10             # multigrid: GMRES steps of each smoothing (more for long, thin cells)
    [time]                           # optional: an unsteady run from rest (or --initial) at t = 0
    t_end = 8.0                      # end time
    dt = 0.01                        # time step
    scheme = "bdf2"                  # or "midpoint"; tolerance = 1e-3: adaptive steps (bdf2)
    start = "rest"                   # or "steady": the steady flow at t = 0 first (without --initial)
    [report]                         # optional (in time: every step, in history.csv)
    forces = { cylinder = { reference_velocity = 0.2, area = 0.041 } }
    points = { front = [0.45, 0.2, 0.205], back = [0.55, 0.2, 0.205] }
    differences = { delta_p = ["front", "back"] }    # pressure differences of named points
    fluxes = { out = "outflow", mid = "x=1.25" }     # flux through a tag (outward) or a plane (toward +x)
    strouhal = { of = "forces.cylinder.coefficients.y", length = 0.1, velocity = 1.0 }  # in time: f L / U
    [output]                         # optional
    dir = "out"
    vtu = true
    pictures = true

Velocity components are numbers or expressions of x, y, z and the time t
(fem3d.problems.expressions: a whitelisted grammar, never eval). Unknown sections and keys are input errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from gpucfd.errors import InputError, check_range, cut, first_few, shown
from .boundary import check_tags, condition_from_spec
from .quantities import flux_target, parse_plane
from ..discretisation.fields import locate
from ..discretisation.mesh import point_text
from ..discretisation.refine import REFINE_MAX
from gpucfd.options import build, from_table, key_of, rules, table
from ..solvers.linear import LinearOptions
from ..solvers.nonlinear import NonlinearOptions
from ..solvers.sequencing import limits as sequence_limits
from ..solvers.time_stepping import TimeOptions, check_alone

CASE_BYTES = 1_000_000  # largest case file read
SECTIONS = {
    "mesh": {"file", "tag_field", "refine"},
    "fluid": {"nu", "re"},
    "boundary": None,  # any tag name
    "solver": {key_of(n, r) for c in (NonlinearOptions, LinearOptions) for n, r in rules(c).items()}
    | {"continuation", "sequence"},
    "time": {key_of(n, r) for n, r in rules(TimeOptions).items()},
    "report": {"forces", "points", "differences", "fluxes", "strouhal"},
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
    nonlinear: dict = field(default_factory=dict)  # NonlinearOptions' settings the file gives, by field name
    linear: dict = field(default_factory=dict)  # LinearOptions' settings the file gives
    continuation: str = "none"
    sequence: str = "none"
    forces: dict = field(default_factory=dict)  # tag -> {"reference_velocity": U, "area": A}
    points: dict = field(default_factory=dict)  # name -> [x, y, z]
    differences: dict = field(default_factory=dict)  # name -> [point a, point b]: p(a) - p(b)
    fluxes: dict = field(default_factory=dict)  # name -> a boundary tag or a plane "x=VALUE" (y, z)
    strouhal: dict | None = None  # {"of": a history column, "length": L, "velocity": U}: St = f L / U in time
    time: TimeOptions | None = None  # the [time] table: an unsteady run
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
    if os.path.getsize(path) > CASE_BYTES:
        raise InputError(f"{path}: {os.path.getsize(path)} bytes; a case file is a few kB (at most {CASE_BYTES})")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the case file ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, UnicodeDecodeError, an integer of 4300 digits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else cut(" ".join(str(exc).split()), 100)
        raise InputError(f"{path}: not a TOML file ({reason})") from None
    try:
        return _case(path, data)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def _case(path: str, data: dict) -> Case:
    unknown = [name for name in data if name not in SECTIONS]
    if unknown:
        raise InputError(
            f"unknown section{'s' if len(unknown) > 1 else ''} {first_few(unknown, show=lambda n: f'[{cut(n)}]')} "
            f"(sections: {', '.join(SECTIONS)})"
        )
    for name, value in data.items():
        if not isinstance(value, dict):
            raise InputError(f"[{name}] must be a table")
        keys = SECTIONS[name]
        extra = sorted(set(value) - keys) if keys is not None else []
        if extra:
            raise InputError(
                f"unknown key(s) {first_few(extra, show=cut)} in [{name}] (keys: {', '.join(sorted(keys))})"
            )
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
    case.nonlinear = from_table(NonlinearOptions, solver, "solver", set())
    case.linear = from_table(LinearOptions, solver, "solver", set())
    if "sequence" in solver:
        value = solver["sequence"]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InputError('[solver] sequence must be "none", "auto" or a count of coarser meshes')
        case.sequence = str(value)
        sequence_limits(case.sequence, "cpu", "[solver] sequence")
    if "continuation" in solver:
        if not isinstance(solver["continuation"], str):
            raise InputError('[solver] continuation must be a string: none, auto or Reynolds numbers like "5,10"')
        case.continuation = solver["continuation"]
    if "time" in data:
        case.time = build(TimeOptions, from_table(TimeOptions, data["time"], "time", set()), table("time"))
        check_alone(case.continuation, case.sequence, lambda name: f"[solver] {name}")
    case.forces = _forces(report.get("forces", {}))
    case.points = _points(report.get("points", {}))
    case.differences = _differences(report.get("differences", {}), case.points)
    case.fluxes = _fluxes(report.get("fluxes", {}), case.boundaries)
    if "strouhal" in report:
        case.strouhal = _strouhal(report["strouhal"], case)
    case.out = output.get("dir", "out")
    if not isinstance(case.out, str):
        raise InputError("[output] dir must be a folder name")
    for key in ("vtu", "pictures"):
        if key in output:
            if not isinstance(output[key], bool):
                raise InputError(f"[output] {key} must be true or false")
            setattr(case, key, output[key])
    return case


def check_report(case: Case, mesh) -> None:
    """InputError (naming the case file) unless the boundary tags of ``case``'s [report] name
    faces of ``mesh`` and its points lie in it: the checks of a report before the solve, alike
    on every rank (the whole mesh; refinement keeps its domain and tags)."""
    try:
        check_tags(mesh, "[report] forces", case.forces)
        for name, through in case.fluxes.items():
            flux_target(through, mesh, f"[report] fluxes.{cut(name)}")
        if case.points:
            elem, _ = locate(mesh, np.array(list(case.points.values()), dtype=np.float64))
            outside = [name for name, e in zip(case.points, elem) if e < 0]
            if outside:
                lo, hi = mesh.bounds()
                raise InputError(
                    f"[report] points: {first_few(outside)} {'lie' if len(outside) > 1 else 'lies'} "
                    f"outside the mesh (it spans {point_text(lo)} to {point_text(hi)})"
                )
    except InputError as exc:
        raise InputError(f"{case.path}: {exc}") from None


def _number(name: str, value, low=None, high=None, open_=False, integer=False) -> float:
    return check_range(name, value, low=low, high=high, low_open=open_, high_open=open_, integer=integer)


def _forces(spec) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] forces must be a table {tag = {reference_velocity = U, area = A}}")
    out = {}
    for tag, scales in spec.items():
        where = f"[report] forces.{cut(tag)}"
        if not isinstance(scales, dict) or set(scales) - {"reference_velocity", "area"}:
            raise InputError(f"{where} takes reference_velocity and area (or nothing: forces only)")
        out[tag] = {k: _number(f"{where}.{k}", v, low=0, open_=True) for k, v in scales.items()}
        if len(out[tag]) == 1:
            raise InputError(f"{where} needs both reference_velocity and area for coefficients")
    return out


def _points(spec) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] points must be a table {name = [x, y, z]}")
    out = {}
    for name, p in spec.items():
        if not isinstance(p, list) or len(p) != 3:
            raise InputError(f"[report] points.{cut(name)} must be [x, y, z] (got {shown(p)})")
        out[name] = [_number(f"[report] points.{cut(name)}", v) for v in p]
    return out


def _differences(spec, points: dict) -> dict:
    if not isinstance(spec, dict):
        raise InputError("[report] differences must be a table {name = [point a, point b]}")
    for name, pair in spec.items():
        if not isinstance(pair, list) or len(pair) != 2 or any(not isinstance(p, str) or p not in points for p in pair):
            raise InputError(
                f"[report] differences.{cut(name)} must name two points of [report] points "
                f"({first_few(points, show=cut) or 'none given'}), got {shown(pair)}"
            )
    return dict(spec)


def columns(case: Case) -> list[str]:
    """The quantity columns of the case's history.csv (fem3d.problems.history.flatten of its
    [report]'s quantities), in their order."""
    out = []
    for tag, scales in case.forces.items():
        out += [f"forces.{tag}.force.{c}" for c in "xyz"]
        out += [f"forces.{tag}.coefficients.{c}" for c in "xyz"] if scales else []
    for name in case.points:
        out += [f"points.{name}.velocity.{c}" for c in "xyz"] + [f"points.{name}.pressure"]
    out += [f"differences.{name}" for name in case.differences]
    return out + [f"fluxes.{name}" for name in case.fluxes]


def _strouhal(spec, case: Case) -> dict:
    where = "[report] strouhal"
    if not isinstance(spec, dict) or set(spec) != {"of", "length", "velocity"}:
        raise InputError(f'{where} must be {{ of = "a reported quantity", length = L, velocity = U }}')
    names = columns(case)
    if spec["of"] not in names:
        raise InputError(
            f"{where}.of must name a reported quantity ({first_few(names, show=cut) or 'none reported'}), got "
            f"{shown(spec['of'])}"
        )
    return {
        "of": spec["of"],
        **{k: _number(f"{where}.{k}", spec[k], low=0, open_=True) for k in ("length", "velocity")},
    }


def _fluxes(spec, boundaries: dict) -> dict:
    if not isinstance(spec, dict):
        raise InputError('[report] fluxes must be a table {name = "tag" or "x=VALUE"}')
    for name, through in spec.items():
        if not (isinstance(through, str) and (through in boundaries or parse_plane(through))):
            raise InputError(
                f"[report] fluxes.{cut(name)} must name a tag of [boundary] ({first_few(boundaries, show=cut)}) "
                f'or a plane "x=VALUE", "y=VALUE" or "z=VALUE" (got {shown(through)})'
            )
    return dict(spec)
