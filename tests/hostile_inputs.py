"""Hostile command lines for every entry point, each with the one-line message it must give.

Run in-process by tests/test_bad_input.py on one rank, and as a script under
``mpiexec -n 2 python tests/hostile_inputs.py FOLDER`` on two: every rank runs every case
through gpucfd.errors.run_cli with stderr captured, and rank 0 prints one JSON line with
each case's exit codes and the stderr of every rank.
"""

import contextlib
import io
import json
import os
import socket
import sys

import meshio
import numpy as np

from fem3d import cavity, run as run_case, verify
from gpucfd.backend import cupy_module
from gpucfd.errors import run_cli
from fem3d.discretisation.mesh import box_mesh
from support import ANNULUS_CASE_TEXT, curved_hex27
from tridiag.cases import cavity2d, cylinder, heat

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "meshes", "distorted_cube_hex8.msh")
FLOW_CASES = {  # case files of flows that are not posed or ask for what the mesh lacks: (text, the message)
    "all_outflow.toml": (
        ANNULUS_CASE_TEXT.replace('{ velocity = ["-y", "x", 0] }', '"outflow"').replace('"wall"', '"outflow"'),
        "every boundary face is outflow: nothing holds or drives the fluid",
    ),
    "net_inflow.toml": (
        ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["x", "y", 0]'),
        "through the prescribed velocities of a closed domain",
    ),
    "report_tag.toml": (
        ANNULUS_CASE_TEXT + "[report]\nforces = { iner = {} }\n",
        "iner",
    ),
    "huge_number.toml": (
        ANNULUS_CASE_TEXT.replace('"-y"', '"' + "9" * 400 + '*y"'),
        "inner",
    ),
    "time_end.toml": (ANNULUS_CASE_TEXT + "[time]\nt_end = 0\ndt = 0.1\n", "[time] t_end must be > 0"),
    "time_step.toml": (ANNULUS_CASE_TEXT + "[time]\nt_end = 1\ndt = -1\n", "[time] dt must be > 0"),
    "time_step_long.toml": (
        ANNULUS_CASE_TEXT + "[time]\nt_end = 1\ndt = 2\n",
        "[time] dt must be at most [time] t_end = 1 (got 2)",
    ),
    "time_no_step.toml": (ANNULUS_CASE_TEXT + "[time]\nt_end = 1\n", "[time] dt must be given"),
    "time_scheme.toml": (
        ANNULUS_CASE_TEXT + '[time]\nt_end = 1\ndt = 0.1\nscheme = "euler"\n',
        "[time] scheme must be one of bdf2, midpoint (got 'euler')",
    ),
    "time_tolerance.toml": (
        ANNULUS_CASE_TEXT + '[time]\nt_end = 1\ndt = 0.1\ntolerance = 1e-3\nscheme = "midpoint"\n',
        "[time] tolerance (adaptive steps) needs [time] scheme bdf2 (got midpoint)",
    ),
    "time_bounds.toml": (
        ANNULUS_CASE_TEXT + "[time]\nt_end = 1\ndt = 0.1\ntolerance = 1e-3\ndt_min = 0.2\n",
        "the steps must satisfy [time] dt_min <= [time] dt <= [time] dt_max (got 0.2, 0.1, inf)",
    ),
    "time_continued.toml": (
        ANNULUS_CASE_TEXT + '[solver]\ncontinuation = "5"\n[time]\nt_end = 1\ndt = 0.1\n',
        "[solver] continuation must be none for an unsteady run (got '5')",
    ),
    "time_not_finite.toml": (
        ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sqrt(0.5-t)", "x*sqrt(0.5-t)", 0]')
        + "[time]\nt_end = 1\ndt = 0.25\n",
        "at t = 0.75",
    ),
    "time_missing.toml": (
        ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(t)", "x*sin(t)", 0]'),
        "depends on the time t: give the time stepping",
    ),
}
PROGRAMS = {
    "fem3d.cavity": cavity.main,
    "fem3d.verify": verify.main,
    "fem3d.run": run_case.main,
    "tridiag.cases.cavity2d": cavity2d.main,
    "tridiag.cases.cylinder": cylinder.main,
    "tridiag.cases.heat": heat.main,
}


def make_files(folder: str) -> dict:
    """Broken input files in ``folder``: meshes and restart files; returns their paths by name."""
    os.makedirs(folder, exist_ok=True)
    paths = {
        name: os.path.join(folder, name)
        for name in (
            "empty.msh",
            "garbage.msh",
            "tets.vtu",
            "inverted.vtu",
            "nan.vtu",
            "restart.txt",
            "short.npy",
            "curved27.vtu",
        )
    }
    open(paths["empty.msh"], "w").close()
    with open(paths["garbage.msh"], "wb") as fh:
        fh.write(bytes(range(256)) * 8)
    meshio.write(paths["tets.vtu"], meshio.Mesh(np.eye(4, 3), [("tetra", np.array([[0, 1, 2, 3]]))]))
    box = box_mesh(2)
    hexes = box.pressure_cells[:, [0, 1, 3, 2, 4, 5, 7, 6]]
    inverted = hexes.copy()
    inverted[3] = inverted[3][[4, 5, 6, 7, 0, 1, 2, 3]]
    meshio.write(paths["inverted.vtu"], meshio.Mesh(box.points[box.pressure_nodes], [("hexahedron", inverted)]))
    points = box.points[box.pressure_nodes].copy()
    points[5, 1] = np.nan
    meshio.write(paths["nan.vtu"], meshio.Mesh(points, [("hexahedron", hexes)]))
    with open(paths["restart.txt"], "w") as fh:
        fh.write("0.1 0.2 0.3\n")
    np.save(paths["short.npy"], np.zeros(7))
    curved_hex27(paths["curved27.vtu"])
    for name, (text, _) in FLOW_CASES.items():
        paths[name] = os.path.join(folder, name)
        with open(paths[name], "w") as fh:
            fh.write(text)
    paths["posed.toml"] = os.path.join(folder, "posed.toml")
    with open(paths["posed.toml"], "w") as fh:
        fh.write(ANNULUS_CASE_TEXT)
    busy = os.path.join(folder, "busy")  # a folder another live run holds (process 1 of this host)
    os.makedirs(busy, exist_ok=True)
    with open(os.path.join(busy, ".lock"), "w") as fh:
        json.dump({"host": socket.gethostname(), "pid": 1}, fh)
    paths["busy"] = busy
    return paths


def cases(folder: str, ranks: int, f: dict) -> list:
    """(program, argv, the message the one line must contain) for every hostile input;
    ``f``: the broken files (:func:`make_files`)."""
    out = ["--out", os.path.join(folder, "out")]
    cav = [
        (["--re", "inf"], "--re must be > 0 and <= 100000 and finite (got inf)"),
        (["--t-end", "1", "--dt", "2"], "--dt must be at most --t-end = 1 (got 2)"),
        (["--t-end", "1"], "--dt must be given for an unsteady run"),
        (["--t-end", "1", "--dt", "0.5", "--dt-max", "1"], "--dt-max bounds adaptive steps: give --tolerance too"),
        (["--t-end", "1", "--dt", "0.5", "--continuation", "auto"], "--continuation must be none for an unsteady run"),
        (["--t-end", "1", "--dt", "0.5", "--tolerance", "2"], "--tolerance must be > 0 and < 1 (got 2"),
        (["--t-end", "1", "--dt", "0.5", "--scheme", "rk4"], "--scheme must be one of bdf2, midpoint (got 'rk4')"),
        (["--re", "nan"], "--re must be > 0 and <= 100000 and finite (got nan)"),
        (["--re", "0"], "--re must be > 0 and <= 100000 (got 0.0)"),
        (["--re", "1e300"], "--re must be > 0 and <= 100000 (got 1e+300)"),
        (["--n", "0"], "--n must be >= 1 and <= 10000 (got 0)"),
        (["--n", "x"], "--n must be auto or an integer >= 1 (got 'x')"),
        (["--n", "1e3"], "--n must be auto or an integer >= 1"),
        (["--n", "1"], "the mesh is too coarse"),
        (["--n", "2000"], "fits at most"),
        (["--grading", "-1"], "--grading must be >= 0 and <= 10 (got -1.0)"),
        (["--grading", "nan"], "--grading must be >= 0 and <= 10 and finite (got nan)"),
        (["--mesh", f["empty.msh"]], "--mesh"),
        (["--mesh", f["garbage.msh"]], "--mesh"),
        (["--mesh", f["tets.vtu"]], "no hexahedron"),
        (["--mesh", f["inverted.vtu"]], "inverted or degenerate"),
        (["--mesh", f["nan.vtu"]], "--mesh"),
        (["--mesh", folder], "is a directory"),
        (["--mesh", SAMPLE, "--lid", "nope"], "boundary tag 'nope' not in the mesh"),
        (["--mesh", SAMPLE, "--lid", "lid", "--refine", "11"], "--refine must be >= 0 and <= 10 (got 11)"),
        (["--mesh", SAMPLE, "--lid", "lid", "--refine", "-1"], "--refine must be >= 0 and <= 10 (got -1)"),
        (["--mesh", SAMPLE, "--lid", "lid", "--refine", "9"], "fits at most"),
        (
            ["--mesh", f["curved27.vtu"], "--refine", "1"],
            "curved27.vtu: element 0 is inverted or degenerate (Jacobian determinant -0.00863 at reference point "
            "(-0.2, -0.2, -1.0))",
        ),
        (["--n", "4", "--refine", "1"], "--refine needs --mesh"),
        (["--mesh", SAMPLE, "--lid", "z=7"], "--lid z=7: no boundary face of the mesh is on the lid"),
        (["--n", "2", "--initial", f["restart.txt"]], "--initial"),
        (["--n", "2", "--initial", f["short.npy"]], "--initial"),
        (["--n", "2", "--initial", os.path.join(folder, "missing.npy")], "--initial"),
        (["--out", "/proc/cannot-write-here"], "--out /proc/cannot-write-here is not a writable directory"),
        (["--tol", "0"], "--tol must be > 0 and < 1"),
        (["--tol", "1"], "--tol must be > 0 and < 1"),
        (["--forcing", "1"], "--forcing must be > 0 and < 1"),
        (["--max-steps", "0"], "--max-steps must be >= 1"),
        (["--keep-factor", "0.5"], "--keep-factor must be >= 1 (got 0.5)"),
        (
            ["--continuation", ",".join(str(100 + k) for k in range(20)), "--re", "1000"],
            "--continuation lists 20 Reynolds numbers; at most 12",
        ),
        (["--continuation", "soon"], "--continuation must be auto, none or"),
        (["--solver", "lu"], "--solver must be one of"),
        (["--matrix-dtype", "float16"], "--matrix-dtype must be one of float64, float32"),
        (["--comm", "carrier-pigeon"], "--comm must be one of auto, serial, mpi, nccl"),
    ]
    if cupy_module() is None:
        cav.append((["--device", "gpu"], "--device gpu requested but no CUDA GPU is usable"))
    out_cases = [("fem3d.cavity", argv + (out if "--out" not in argv else []), message) for argv, message in cav]
    vout = ["--out", os.path.join(folder, "v.json")]
    out_cases += [
        ("fem3d.verify", argv + vout, message)
        for argv, message in [
            (["--n", "0"], "--n must be >= 1 and <= 10000 (got 0)"),
            (["--re", "-1"], "--re must be > 0"),
            (["--n", "2000"], "fits at most"),
            (["--n", "2", "--forcing", "0"], "--forcing must be > 0 and < 1"),
        ]
    ]
    out_cases.append(("fem3d.verify", ["--n", "2", "--out", "/proc/cannot-write-here/v.json"], "is not writable"))
    out_cases += [("fem3d.run", [f[name], *out], message) for name, (_, message) in FLOW_CASES.items()]
    out_cases.append(("fem3d.run", [f["report_tag.toml"].replace("report_tag", "missing")], "case file not found"))
    out_cases.append(("fem3d.run", [f["posed.toml"], "--out", f["busy"]], "busy is in use by process 1 (remove"))
    if ranks > 1:
        out_cases.append(
            (
                "fem3d.verify",
                ["--n", "1", "--solver", "paper", *vout],
                "the mesh is too coarse: 3 free velocity unknowns for 8 pressure unknowns",
            )
        )
    flow_out = ["--out", os.path.join(folder, "flow")]
    out_cases += [
        ("tridiag.cases.cavity2d", ["--re", "inf", *flow_out], "--re must be"),
        ("tridiag.cases.cavity2d", ["--n", "200000", *flow_out], "fits at most"),
        ("tridiag.cases.cylinder", ["--re", "inf", *flow_out], "--re must be"),
        ("tridiag.cases.heat", ["unsteady", "--dx", "1e-300", *flow_out], "--dx must be"),
        ("tridiag.cases.heat", ["unsteady", "--n", "1000000", *flow_out], "fits at most"),
    ]
    return [
        (prog, [*argv, *(["--device", "cpu"] if "--device" not in argv else [])], message)
        for prog, argv, message in out_cases
    ]


def run(prog: str, argv: list) -> tuple:
    """(exit code, what it wrote to stderr) of ``prog argv`` run in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = run_cli(PROGRAMS[prog], argv, prog=prog.split()[-1])
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, err.getvalue()


def main() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    folder = sys.argv[1]
    files = comm.bcast(make_files(folder) if comm.rank == 0 else None)
    results = [run(prog, argv) for prog, argv, _ in cases(folder, comm.size, files)]
    every = comm.gather(results)
    if comm.rank == 0:
        print(json.dumps([[every[r][k] for r in range(comm.size)] for k in range(len(results))]))


if __name__ == "__main__":
    main()
