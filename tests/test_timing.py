"""Honest timing (design.md's unit time). The phases in summary.json are disjoint
intervals, each second in one, so T_run, their sum, is at most the process's wall time,
and T_unit = T_run 1e6 / (N_steps N_elem) follows from it. Each command runs in a child
process as a user runs it, timed from outside; in the delayed runs one step of the
system's set-up is made to take SLOW seconds, which must count once, in data_preparation."""

import json
import os
import subprocess
import sys
import time

import pytest
from support import MESHES

RUN_PHASES = ["data_preparation", "element_matrices", "linear_setup", "solve"]  # T_run's, design.md
SLOW = 1.0
CASE = f"""
[mesh]
file = "{os.path.abspath(os.path.join(MESHES, "distorted_cube_hex8.msh"))}"

[fluid]
nu = 0.01

[boundary]
lid = {{ velocity = [1, 0, 0] }}
walls = "wall"

[solver]
tol = 1e-6
continuation = "50"
"""
# the command's main with the system's pressure weights (part of its set-up) SLOW seconds late
DELAYED = f"""
import sys, time
import fem3d.problems.navier_stokes as ns
weights = ns.pressure_weights
def slow(*args):
    time.sleep({SLOW})
    return weights(*args)
ns.pressure_weights = slow
from fem3d.{{}} import main
raise SystemExit(main())
"""


def command_args(name, tmp_path):
    """fem3d.cavity on a 4^3 box at Re 100 after Re 50, or fem3d.run on a case of the
    distorted cube (216 elements) at nu 0.01 after Re 50: both a continuation of 2 stages."""
    out = ["--device", "cpu", "--no-plots", "--no-vtu", "--out", str(tmp_path / "out")]
    if name == "cavity":
        return ["--n", "4", "--re", "100", "--continuation", "50", *out]
    case = tmp_path / "cube.toml"
    case.write_text(CASE)
    return [str(case), *out]


def timed_run(tmp_path, argv):
    """(summary.json of the run, its wall-clock seconds measured from outside)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr
    return json.loads((tmp_path / "out" / "summary.json").read_text()), wall


def check_timing(summary, wall):
    times = dict(summary["times_s"])
    output = times.pop("output", 0.0)  # the cavity's writing of its results, after T_run
    assert list(times) == RUN_PHASES and all(v > 0 for v in times.values())
    assert sum(times.values()) == pytest.approx(summary["t_run_s"], rel=1e-12)
    assert summary["per_rank"][0]["times_s"] == times  # one rank's timer: the same seconds
    assert summary["wall_since"] == ("process start" if sys.platform == "linux" else "gpucfd import")
    assert summary["t_run_s"] + output <= summary["wall_s"] <= wall
    stages = summary["continuation"]
    steps = sum(len(stage["steps"]) for stage in stages)  # T_run counts every stage's steps
    assert len(stages) == 2 and steps > len(stages[-1]["steps"])
    assert summary["t_unit_us"] == pytest.approx(
        summary["t_run_s"] * 1e6 / (steps * summary["mesh"]["elements"]), rel=1e-12
    )


@pytest.mark.parametrize("name", ["cavity", "run"])
def test_the_phases_add_up_to_t_run_within_the_process_wall_time(tmp_path, name):
    summary, wall = timed_run(tmp_path, ["-m", f"fem3d.{name}", *command_args(name, tmp_path)])
    check_timing(summary, wall)


@pytest.mark.parametrize("name", ["cavity", "run"])
def test_the_system_set_up_counts_once_in_data_preparation(tmp_path, name):
    """The set-up made SLOW seconds longer: data_preparation grows by SLOW, not twice SLOW
    (the system's own set-up timer and the caller's preparation both held it)."""
    summary, wall = timed_run(tmp_path, ["-c", DELAYED.format(name), *command_args(name, tmp_path)])
    assert SLOW <= summary["times_s"]["data_preparation"] < 2 * SLOW
    check_timing(summary, wall)
