"""Time stepping (fem3d.solvers.time_stepping): temporal order on a manufactured flow, the
steady state reached in time, the pipeline's unsteady runs (API and case file), history.csv."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fem3d
from fem3d import run as run_case
from fem3d.discretisation.mesh import box_mesh
from fem3d.parallel.comm import SerialComm, launched_ranks
from fem3d.problems.boundary import Velocity
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
from fem3d.solvers.time_stepping import TimeOptions, TimeState, TimeStepper
from gpucfd.errors import InputError
from support import ANNULUS_CASE_TEXT, case_file, sample_mesh

NU = 0.1
FACES = ("x0", "x1", "y0", "y1", "z0", "z1")
AMPLITUDE = "(1+sin(2*t))"  # g(t) of the manufactured flow u = g(t) U(x)


def g(t):
    return 1.0 + np.sin(2.0 * t)


def shape(xp, x):
    """U(x) = (z^2, x^2, y^2): divergence-free and in the Q2 space."""
    return xp.stack([x[..., 2] ** 2, x[..., 0] ** 2, x[..., 1] ** 2], axis=-1)


def manufactured_force(xp, x, t):
    """f = g' U + g^2 (U . grad) U - nu g lap U + grad p for u = g(t) U, p = g(t) (x + y + z - 3/2)."""
    X, Y, Z = x[..., 0], x[..., 1], x[..., 2]
    convection = xp.stack([2 * Y**2 * Z, 2 * X * Z**2, 2 * Y * X**2], axis=-1)
    return 2.0 * np.cos(2.0 * t) * shape(xp, x) + g(t) ** 2 * convection - NU * g(t) * 2.0 + g(t)


def manufactured_flow(mesh):
    """The flow u = g(t) U with its velocity on every face: in the discrete space at every t, so
    with the consistent stabilisation only the time discretisation errs."""
    velocity = Velocity(*(f"{AMPLITUDE}*{c}**2" for c in "zxy"))
    return FlowProblem.with_conditions(mesh, 1.0 / NU, {f: velocity for f in FACES}, force=manufactured_force)


def exact_velocity(mesh, t):
    return (g(t) * shape(np, mesh.points)).T.ravel()


def manufactured_stepper(options: TimeOptions):
    """(box mesh, TimeStepper of the manufactured flow with ``options``, exact state at t)."""
    mesh = box_mesh(2)
    system = NavierStokesSystem(manufactured_flow(mesh), fem3d_backend())
    linear = make_linear_solver(LinearOptions(solver="mg").for_mesh(mesh))
    solver = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-12, max_steps=20))
    return (
        mesh,
        TimeStepper(system, solver, options),
        lambda t: np.concatenate([exact_velocity(mesh, t), np.zeros(mesh.n_pressure)]),
    )


def stepped_error(scheme: str, steps: int, t_end: float = 0.4) -> float:
    """Largest nodal velocity error at t_end of ``steps`` steps from the exact state at t = 0."""
    options = TimeOptions(t_end=t_end, dt=t_end / steps, scheme=scheme)
    mesh, stepper, exact = manufactured_stepper(options)
    last, records, reason = stepper.run(TimeState(0, 0.0, exact(0.0)))
    assert reason == "converged" and last.step == steps and len(records) == steps
    return float(np.abs(last.x - exact(t_end))[: 3 * mesh.n_nodes].max())


def fem3d_backend():
    from gpucfd.backend import get_backend

    return get_backend("cpu")


@pytest.mark.parametrize("scheme", ["bdf2", "midpoint"])
def test_temporal_order_is_two(scheme):
    """Both schemes converge at order >= 1.9 in the step (16 and 32 steps to t = 0.4) on a flow
    whose boundary data and force change in time; the errors are far above the solves' tolerance."""
    coarse, fine = stepped_error(scheme, 16), stepped_error(scheme, 32)
    assert coarse > 1e-6
    assert np.log2(coarse / fine) >= 1.9


def test_the_error_estimate_of_bdf2_with_unequal_steps():
    """Milne's device with three unequal steps (h2, h1, h): on y' = 3 t^2 (y = t^3, whose
    third derivative is constant) the estimate is BDF2's local error exactly; on the
    manufactured flow (one step from exact states) it falls as h^3 and lies within 1 to 2
    times the true error (the boundary data imposed exactly with a consistent mass matrix
    shape the true error; the estimate errs on the safe side)."""
    from fem3d.solvers.time_stepping import error_fraction, extrapolate

    t0, h2, h1, h = 0.3, 0.03, 0.05, 0.04
    w, t1 = h / h1, t0 + h
    y = np.array([t0**3])
    bdf2 = (h * 3 * t1**2 + (1 + w) * y - w * w / (1 + w) * (t0 - h1) ** 3) * (1 + w) / (1 + 2 * w)
    state = TimeState(3, t0, y, np.array([(t0 - h1) ** 3]), h1, None, np.array([(t0 - h1 - h2) ** 3]), h2)
    estimate = error_fraction(h, h1, h2) * abs(bdf2 - extrapolate(state, t1))
    assert estimate[0] == pytest.approx(abs(t1**3 - bdf2[0]), rel=1e-9)
    estimates = []
    for scale in (1.0, 0.5):
        t1 = t0 + scale * h
        options = TimeOptions(t_end=t1, dt=scale * h, tolerance=0.5)
        mesh, stepper, exact = manufactured_stepper(options)
        start = TimeState(3, t0, exact(t0), exact(t0 - scale * h1), scale * h1, None, None, scale * h2)
        start.older = exact(t0 - scale * (h1 + h2))
        last, records, reason = stepper.run(start)
        assert reason == "converged" and last.t == t1 and records[0].dt == pytest.approx(scale * h, rel=1e-12)
        free = ~stepper.system.fixed
        free[3 * mesh.n_nodes :] = False  # the velocity the steps determine (the boundary's is imposed)
        true = np.linalg.norm((last.x - exact(t1))[free]) / np.linalg.norm(last.x[free])
        assert true > 1e-7 and 1.0 < records[0].error / true < 2.0
        estimates.append(records[0].error)
    assert 7.0 < estimates[0] / estimates[1] < 9.0


def test_adaptive_steps_follow_their_tolerance():
    """The manufactured flow to t = 1.5 (g = 1 + sin 2t turns twice) from steps of 0.01:
    adaptive steps grow past 5 times the first, every step's estimate is within its tolerance,
    and a tolerance 10 times tighter takes more steps (about 10^(1/3) times) for an error about
    10^(2/3) times smaller."""
    outcome = {}
    for tolerance in (1e-4, 1e-5):
        options = TimeOptions(t_end=1.5, dt=0.01, tolerance=tolerance)
        mesh, stepper, exact = manufactured_stepper(options)
        last, records, reason = stepper.run(TimeState(0, 0.0, exact(0.0)))
        assert reason == "converged" and last.t == 1.5
        assert max(r.dt for r in records) > 0.05 and all(r.error <= tolerance for r in records[2:])
        assert [r.error for r in records[:2]] == [None, None]
        assert records[-1].dt > 0.1 * records[-2].dt  # no sliver of a last step (STRETCH)
        outcome[tolerance] = (len(records), float(np.abs(last.x - exact(1.5))[: 3 * mesh.n_nodes].max()))
    (steps, error), (more, smaller) = outcome[1e-4], outcome[1e-5]
    assert 1.6 < more / steps < 3.0 and 2.5 < error / smaller < 10


def test_the_progress_bar_of_a_terminal():
    """On a terminal each step redraws one line in place: a bar of the time done and the step's
    line; other lines print above it; the last state stays."""
    import io

    from fem3d.commands.time_output import StepBar
    from fem3d.solvers.time_stepping import TimeStep

    stream = io.StringIO()
    bar = StepBar(2.0, stream)
    step = TimeStep(3, 0.5, 0.5, 0.25, True, "converged", 1e-9, 2, 7, 0.5)
    bar.status(step, 0.25, 90.0)
    bar.say("a warning")
    bar.close()
    line = "step 3  t 0.5/2  dt 0.25  2 Newton, 7 Krylov  0.50 s  90 s left"
    drawn = f"[{'#' * 6}{'.' * 18}] {line}"
    assert stream.getvalue() == f"\r\x1b[K{drawn}\r\x1b[Ka warning\n{drawn}\n"


def test_a_step_with_the_exact_history_has_no_error_in_space():
    """Control: u = g U lies in the discrete space, so a BDF1 step whose time derivative is the
    exact one (sigma u - h with h = sigma u(t1) - u'(t1)) returns the exact state to round-off:
    the order test above measures the time discretisation alone."""
    mesh = box_mesh(2)
    system = NavierStokesSystem(manufactured_flow(mesh), fem3d_backend())
    t1, sigma = 0.3, 10.0
    exact = exact_velocity(mesh, t1)
    rate = 2.0 * np.cos(2.0 * t1) * shape(np, mesh.points)
    history = sigma * exact.reshape(3, -1).T - rate
    system.set_time(sigma, history, t1, system.problem.values_at(t1))
    linear = make_linear_solver(LinearOptions(solver="mg").for_mesh(mesh))
    result = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-13, max_steps=20)).solve()
    assert result.converged
    assert np.abs(result.x[: 3 * mesh.n_nodes] - exact).max() < 1e-10


def channel_flow(velocity="1"):
    """A 3 x 2 x 2 box: plug inflow ``velocity`` at x = 0, outflow at x = 1, walls elsewhere, nu = 1."""
    mesh = box_mesh(3, 2, 2)
    walls = {f: fem3d.Wall() for f in ("y0", "y1", "z0", "z1")}
    return fem3d.Flow(mesh, {"x0": fem3d.Velocity(velocity, 0, 0), "x1": fem3d.Outflow(), **walls}, nu=1.0)


def test_time_stepping_reaches_the_steady_solution():
    """From rest, a steady inflow stepped to t = 12 (viscous decay time about 0.05) lands on
    the steady solver's solution to 1e-6 relative, velocity and pressure: the steady state of
    the stepped equations differs only by the time limit of tau (consistent stabilisation),
    here by about 1e-7. (BDF2 damps every error mode; the midpoint rule hardly damps the
    stiff ones, |R| -> 1, and approaches a steady state slowly.)"""
    tight = fem3d.NonlinearOptions(tol=1e-12, max_steps=30)
    steady = channel_flow().solve(device="cpu", nonlinear=tight)
    stepped = channel_flow().solve(device="cpu", nonlinear=tight, time={"t_end": 12, "dt": 0.5})
    assert stepped.converged and stepped.time["t"] == 12 and stepped.time["steps"] == 24
    assert np.abs(stepped.x - steady.x).max() < 1e-6 * np.abs(steady.x).max()


def test_a_run_may_start_from_the_steady_flow():
    """[time] start = steady: the steady flow of the data at t = 0 is solved first (the
    result's history holds its solve), and steps from it stay on it to 1e-6 relative (the
    time limit of tau moves it by about 1e-7), at most two Newton steps each; a given initial state
    with it is an input error."""
    tight = fem3d.NonlinearOptions(tol=1e-10, max_steps=30)
    steady = channel_flow().solve(device="cpu", nonlinear=tight)
    stepped = channel_flow().solve(device="cpu", nonlinear=tight, time={"t_end": 1, "dt": 0.5, "start": "steady"})
    assert stepped.converged and stepped.time["steps"] == 2 and stepped.history[0]["converged"]
    assert np.abs(stepped.x - steady.x).max() < 1e-6 * np.abs(steady.x).max()
    assert max(s.nonlinear_steps for s in stepped.time_steps) <= 2
    with pytest.raises(InputError, match="start= = steady solves the state at t = 0: give no initial state"):
        channel_flow().solve(device="cpu", time={"t_end": 1, "dt": 0.5, "start": "steady"}, initial=steady.x)


def test_a_steady_start_that_fails_says_so(tmp_path):
    """fem3d.cavity --start steady whose steady solve stops (one Newton step allowed): exit 3,
    one line that names the steady start and the way out, no steps made."""
    argv = ["--n", "4", "--re", "100", "--t-end", "0.2", "--dt", "0.1", "--start", "steady", "--max-steps", "1"]
    p = subprocess.run(
        [sys.executable, "-m", "fem3d.cavity", *argv, "--out", str(tmp_path), "--no-plots", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1
    assert "the steady flow at t = 0 did not converge: start from rest instead" in p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["time"]["steps"] == 0 and not summary["converged"]


def test_unsteady_api_reports_each_step():
    """on_step gets each step with a state whose quantities can be measured; midpoint steps
    report at their stage times (the first step, BDF1, at its end); the flow rates of the
    result are those at the time reached; the summary counts every time step's Newton steps."""
    seen = []
    flow = channel_flow("sin(t)")

    def on_step(step, state):
        seen.append((step.t, step.end, float(state.flux("x0"))))

    result = flow.solve(device="cpu", on_step=on_step, time={"t_end": 1.0, "dt": 0.25, "scheme": "midpoint"})
    assert [s[0] for s in seen] == [0.25, 0.375, 0.625, 0.875] and [s[1] for s in seen] == [0.25, 0.5, 0.75, 1.0]
    inflow = np.array([s[2] for s in seen])  # outward flux of the step's boundary data (a stage's: the mean)
    means = np.array([np.sin(0.25)] + [(np.sin(a) + np.sin(a + 0.25)) / 2 for a in (0.25, 0.5, 0.75)])
    assert np.allclose(-inflow, means * (1 - 1 / 6) ** 2, rtol=1e-9)  # walls take the inflow's edge nodes
    rates = result.flow_rates()["x0"]  # at the time reached
    assert rates["nominal"] == pytest.approx(-np.sin(1.0)) and rates["delivered"] == pytest.approx(
        -np.sin(1.0) * (1 - 1 / 6) ** 2
    )
    summary = result.summary()
    assert summary["time"]["steps"] == 4 and summary["nonlinear_steps"] == summary["time"]["newton_steps"] >= 4
    assert flow.re == 1.0


def test_time_dependent_data_need_time_stepping_and_time_settings_are_checked():
    flow = channel_flow("sin(t)")
    with pytest.raises(InputError, match="depends on the time t"):
        flow.solve(device="cpu")
    with pytest.raises(InputError, match="dt= must be at most t_end= = 1"):
        flow.solve(device="cpu", time={"t_end": 1, "dt": 3})
    with pytest.raises(InputError, match="time= must be a TimeOptions"):
        flow.solve(device="cpu", time=5)
    with pytest.raises(InputError, match="continuation= must be none for an unsteady run"):
        flow.solve(device="cpu", time=TimeOptions(t_end=1, dt=0.5), continuation="auto")


def test_case_file_in_time_writes_history_as_it_goes(tmp_path):
    """fem3d.run with a [time] table: one history.csv row per step (t, the step's counts, then
    the [report]'s quantities as named in summary.json), the extrema in summary.json."""
    text = ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(t)", "x*sin(t)", 0]') + (
        "[time]\nt_end = 0.3\ndt = 0.1\n"
        + "[report]\nforces = { inner = { reference_velocity = 1, area = 2 } }\n"
        + "points = { a = [0.6, 0.1, 0.2], b = [-0.6, 0.1, 0.2] }\n"
        + 'differences = { delta_p = ["a", "b"] }\n'
    )
    path = case_file(tmp_path, text)
    out = tmp_path / "out"
    assert run_case.main([path, "--out", str(out), "--no-plots", "--no-vtu", "--quiet"]) == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["t"]) for r in rows] == [0.1, 0.2, 0.3]
    assert int(rows[0]["newton_steps"]) >= 1 and "forces.inner.coefficients.x" in rows[0]
    summary = json.loads((out / "summary.json").read_text())
    torque_side = [float(r["forces.inner.coefficients.y"]) for r in rows]
    series = summary["time"]["series"]["forces.inner.coefficients.y"]
    assert series["max"] == max(torque_side) and series["min"] == min(torque_side)
    assert series["end"] == torque_side[-1] == summary["quantities"]["forces"]["inner"]["coefficients"][1]
    assert float(rows[-1]["differences.delta_p"]) == summary["quantities"]["differences"]["delta_p"]
    assert summary["converged"] and summary["time"]["t"] == 0.3


def test_history_survives_a_kill(tmp_path):
    """SIGKILL in the middle of an unsteady run: every row written before it is whole."""
    text = ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(t)", "x*sin(t)", 0]') + (
        "[time]\nt_end = 1000\ndt = 0.5\n[report]\npoints = { a = [0.6, 0.1, 0.2] }\n"
    )
    path = case_file(tmp_path, text)
    history = tmp_path / "out" / "history.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fem3d.run", path, "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if history.exists() and len(history.read_text().splitlines()) >= 4:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = history.read_text().splitlines()
    assert len(lines) >= 4 and history.read_text().endswith("\n")
    header = lines[0].split(",")
    assert header[:2] == ["t", "dt"] and "points.a.pressure" in header
    for k, line in enumerate(lines[1:], start=1):
        values = [float(v) for v in line.split(",")]
        assert len(values) == len(header) and values[0] == 0.5 * k
    assert not os.path.exists(tmp_path / "out" / "summary.json")


@pytest.mark.parametrize("steps", ['scheme = "bdf2"', 'scheme = "midpoint"', "tolerance = 1e-3"])
def test_a_run_continued_from_a_checkpoint_is_the_uninterrupted_run(tmp_path, steps):
    """A run stopped at t_end 1 of 2 with checkpoints every 3 steps (fixed steps of 0.25: at
    step 3, after 4 of 8 steps), continued with --initial checkpoint.npz to t_end 2: history.csv (but the
    seconds) and the final solution equal the uninterrupted run's bit for bit; the rows of the
    first part after the checkpoint, made again, are replaced. Adaptive steps too (their
    lengths vary). Snapshots every 2 steps make a PVD time series that PyVista reads."""
    base = ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(2*t)", "x*sin(2*t)", 0]') + (
        "[report]\npoints = { a = [0.6, 0.1, 0.2] }\n[time]\ndt = 0.25\ncheckpoint_every = 3\nsnapshot_every = 2\n"
        f"{steps}\n"
    )
    whole = case_file(tmp_path, base + "t_end = 2\n", "whole.toml")
    part = case_file(tmp_path, base + "t_end = 1\n", "part.toml")
    quiet = ["--no-plots", "--no-vtu", "--quiet", "--device", "cpu"]
    assert run_case.main([whole, "--out", str(tmp_path / "a"), *quiet]) == 0
    assert run_case.main([part, "--out", str(tmp_path / "b"), *quiet]) == 0
    checkpoint = str(tmp_path / "b" / "checkpoint.npz")
    assert run_case.main([whole, "--out", str(tmp_path / "b"), "--initial", checkpoint, *quiet]) == 0

    def rows(folder):
        with open(tmp_path / folder / "history.csv") as fh:
            table = list(csv.reader(fh))
        seconds = table[0].index("seconds")
        return [[v for i, v in enumerate(r) if i != seconds] for r in table]

    assert rows("a") == rows("b")
    lengths = {float(r[1]) for r in rows("a")[1:]}
    assert (len(rows("a")), lengths) == (9, {0.25}) if "scheme" in steps else len(lengths) > 2
    a, b = (np.load(tmp_path / f / "solution.npy") for f in "ab")
    assert np.array_equal(a.view(np.int64), b.view(np.int64))
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    started = summary["time"]["started_at_step"]  # the last checkpoint before t = 1
    assert started == 3 if "scheme" in steps else started % 3 == 0 < started
    assert summary["time"]["steps"] == len(rows("a")) - 1
    pyvista = pytest.importorskip("pyvista")

    reader = pyvista.get_reader(str(tmp_path / "b" / "flow.pvd"))
    assert np.allclose(reader.time_values, [float(r[0]) for r in rows("a")[2::2]])
    reader.set_active_time_value(reader.time_values[-1])
    assert "velocity" in reader.read()[0].point_data


def test_a_checkpoint_must_fit_the_run(tmp_path):
    """--initial checkpoint.npz with another dt, without [time], or at t_end: one line, exit 2."""
    base = ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(t)", "x*sin(t)", 0]')
    path = case_file(tmp_path, base + "[time]\nt_end = 0.5\ndt = 0.25\ncheckpoint_every = 1\n")
    out = str(tmp_path / "out")
    assert run_case.main([path, "--out", out, "--no-plots", "--no-vtu", "--quiet", "--device", "cpu"]) == 0
    checkpoint = os.path.join(out, "checkpoint.npz")
    for text, message in (
        (base + "[time]\nt_end = 1\ndt = 0.2\n", "made with dt 0.25; continue it with the same ([time] dt = 0.2 now)"),
        (base + "[time]\nt_end = 1\ndt = 0.25\ntolerance = 0.01\n", "made with tolerance none, dt_min none"),
        (base + "[time]\nt_end = 0.5\ndt = 0.25\n", "it stands at t = 0.5, not before [time] t_end = 0.5"),
        (ANNULUS_CASE_TEXT, "a checkpoint continues a run in time"),
    ):
        other = case_file(tmp_path, text, "other.toml")
        proc = subprocess.run(
            [sys.executable, "-m", "fem3d.run", other, "--out", str(tmp_path / "o2"), "--initial", checkpoint],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_checkpoint_is_refused_on_another_numbering_of_its_unknowns(tmp_path):
    """checkpoint.npz keeps where NODE_SAMPLE nodes are: read back on its mesh it continues;
    on another mesh of as many unknowns (the annulus turned), or without them on a refined
    mesh (an earlier fem3d numbered refined meshes otherwise), it is refused in one line; an
    unrefined mesh's checkpoint without them still continues."""
    from dataclasses import replace

    from fem3d.discretisation.refine import refine
    from fem3d.problems.checkpoint import read_checkpoint, write_checkpoint

    refined, options = refine(sample_mesh("annulus"), 1), TimeOptions(t_end=1.0, dt=0.25)
    path = str(tmp_path / "checkpoint.npz")
    write_checkpoint(path, TimeState(1, 0.25, np.ones(refined.n_dofs)), options, refined)
    assert read_checkpoint(path, refined, options).step == 1
    turned = replace(refined, points=refined.points[:, [1, 0, 2]])
    with pytest.raises(InputError, match="its nodes are not where this mesh's are"):
        read_checkpoint(path, turned, options)
    fields = dict(np.load(path))
    del fields["nodes_at"]
    np.savez(path, **fields)
    with pytest.raises(InputError, match="made by an earlier fem3d, which numbered a refined mesh's nodes otherwise"):
        read_checkpoint(path, refined, options)
    plain = replace(refined)  # the same arrays, no longer known as refined
    plain.coarser = None
    assert read_checkpoint(path, plain, options).step == 1


@pytest.mark.mpi
def test_steps_on_ranks_equal_the_single_process_steps():
    """Under mpiexec -n 2 and 3: the annulus (cut by METIS) stepped in time gives every
    step's point value and the final state of one process to 1e-8, with the same Newton steps."""
    from fem3d.parallel.comm import setup

    if launched_ranks() < 2:
        pytest.skip("run under mpiexec")
    backend, comm = setup("cpu", "auto")
    mesh = sample_mesh("annulus")
    flow = fem3d.Flow(
        mesh, {"inner": fem3d.Velocity("-y*sin(2*t)", "x*sin(2*t)", 0), "outer": "wall", "ends": "wall"}, re=20
    )
    time_options = {"t_end": 1.0, "dt": 0.25, "scheme": "midpoint"}

    def series(device, communicator):
        seen = []
        result = flow.solve(
            device=device,
            comm=communicator,
            time=time_options,
            on_step=lambda step, state: seen.append((step.nonlinear_steps, *state.values([[0.6, 0.1, 0.2]])[0][0])),
        )
        return result, np.array(seen)

    ranks, on_ranks = series(backend, comm)
    single, alone = series(backend, SerialComm())
    assert np.array_equal(on_ranks[:, 0], alone[:, 0])
    assert np.abs(on_ranks[:, 1:] - alone[:, 1:]).max() < 1e-8 * np.abs(alone[:, 1:]).max()
    if comm.rank == 0:
        assert np.abs(ranks.x - single.x).max() < 1e-8 * np.abs(single.x).max()


def test_the_period_of_a_signal_that_became_periodic():
    """fem3d.problems.periodic on sampled signals: a sine of period 0.3 after a decaying start
    gives its period, mean and amplitude; a growing oscillation and a steady signal are not
    periodic; a signal whose cycles alternate (the drag of a cylinder off the channel's centre
    line: twice the lift's frequency, and every second peak higher) has the period of two; one
    modulated at a quarter of its frequency that of four; one modulated at an incommensurate
    frequency none."""
    from fem3d.problems.periodic import periodic

    t = np.arange(0, 6, 0.003)
    settled = 0.2 + 0.7 * np.sin(2 * np.pi * t / 0.3) + 3.0 * np.exp(-5 * t) * np.cos(7 * t)
    found = periodic(t, settled)
    assert abs(found["period"] - 0.3) < 1e-5 and abs(found["amplitude"] - 0.7) < 1e-3
    assert abs(found["mean"] - 0.2) < 2e-3 and found["since"] > 4.4
    assert periodic(t, np.exp(0.5 * t) * np.sin(2 * np.pi * t / 0.3)) is None
    assert periodic(t, 1.0 - np.exp(-t)) is None
    drag = 3.2 + 0.03 * np.sin(4 * np.pi * t / 0.3) + 0.002 * np.sin(2 * np.pi * t / 0.3)
    found = periodic(t, drag)
    assert abs(found["period"] - 0.3) < 1e-5 and found["max"] == drag[t > 4].max()
    modulated = np.sin(2 * np.pi * t / 0.3) + 0.1 * np.sin(2 * np.pi * t / 1.2)  # repeats after 4 cycles
    assert abs(periodic(t, modulated)["period"] - 1.2) < 1e-4
    assert periodic(t, np.sin(2 * np.pi * t / 0.3) + 0.1 * np.sin(2 * np.pi * t / 1.37)) is None  # never repeats


def test_the_strongest_frequency_of_a_signal_that_does_not_repeat():
    """fem3d.problems.periodic.spectral_peak: over the last half of the run, uneven steps
    included, the frequency of the strongest of three incommensurate sines (which periodic()
    finds no period of) to 5 % of a bin's width, and of a sine whose amplitude wanders
    at random, and of one on a drift; None for a signal that settles, one of under three
    cycles over the last half, a constant one, a run of too few steps and one that is not
    finite."""
    from fem3d.problems.periodic import periodic, spectral_peak

    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.2, 0.6, 4000))  # adaptive steps, about 1600 time units
    mixed = np.sin(2 * np.pi * 0.0925 * t) + 0.4 * np.sin(2 * np.pi * 0.0364 * t) + 0.3 * np.sin(2 * np.pi * 0.131 * t)
    found = spectral_peak(t, mixed)
    width = 1.0 / (t[-1] - found["since"])
    assert periodic(t, mixed) is None
    assert abs(found["frequency"] - 0.0925) < 0.05 * width and abs(found["since"] - t[-1] / 2) < 1.0
    wandering = (1 + 0.5 * np.cumsum(rng.standard_normal(len(t))) / np.sqrt(len(t))) * np.cos(2 * np.pi * 0.41 * t)
    assert abs(spectral_peak(t, wandering)["frequency"] - 0.41) < 0.5 * width
    drifting = mixed + 0.02 * t  # an oscillation on a drift: the drift removed first
    assert abs(spectral_peak(t, drifting)["frequency"] - 0.0925) < 0.05 * width
    assert spectral_peak(t, 1.0 - np.exp(-t / 400)) is None  # settling: no oscillation
    assert spectral_peak(t, np.sin(2 * np.pi * t / 500)) is None  # under three cycles over the last half
    assert spectral_peak(t, np.full(len(t), 2.0)) is None
    assert spectral_peak(t[:30], mixed[:30]) is None
    assert spectral_peak(t, np.where(t > 1500, np.nan, mixed)) is None


def test_strouhal_names_a_reported_quantity(tmp_path):
    text = ANNULUS_CASE_TEXT + '[report]\npoints = { a = [0.6, 0.1, 0.2] }\nstrouhal = { of = "points.b.pressure", '
    text += "length = 1, velocity = 1 }\n"
    from fem3d.problems.case import read_case

    with pytest.raises(InputError, match=r"\[report\] strouhal.of must name a reported quantity \(points.a.velocity.x"):
        read_case(case_file(tmp_path, text))
    case = read_case(case_file(tmp_path, text.replace("points.b.pressure", "points.a.pressure"), "ok.toml"))
    assert case.strouhal == {"of": "points.a.pressure", "length": 1.0, "velocity": 1.0}


def test_a_periodic_run_reports_its_strouhal_number(tmp_path):
    """The annulus driven by an inner wall turning as sin(2 pi t / 0.5): the point velocity
    settles to period 0.5, so St = f L / U = 2 with L = U = 1 (summary.json and the report)."""
    text = ANNULUS_CASE_TEXT.replace('["-y", "x", 0]', '["-y*sin(4*pi*t)", "x*sin(4*pi*t)", 0]') + (
        "[time]\nt_end = 3.0\ndt = 0.0625\n[report]\npoints = { a = [0.6, 0.1, 0.2] }\n"
        'strouhal = { of = "points.a.velocity.y", length = 1, velocity = 1 }\n'
    )
    out = tmp_path / "out"
    assert run_case.main([case_file(tmp_path, text), "--out", str(out), "--no-plots", "--no-vtu", "--quiet"]) == 0
    time_record = json.loads((out / "summary.json").read_text())["time"]
    assert abs(time_record["strouhal"]["value"] - 2.0) < 5e-3
    assert abs(time_record["strouhal"]["peak"] - 2.0) < 0.05  # 1.5 time units of 1/16: bins of 2/3
    assert abs(time_record["spectrum"]["points.a.velocity.y"]["frequency"] - 2.0) < 0.05
    assert abs(time_record["periodic"]["points.a.velocity.y"]["period"] - 0.5) < 1.5e-3


def test_history_picture_shows_the_quantities_that_move(tmp_path):
    """history.png: coefficients instead of the forces they scale, no round-off columns."""
    from fem3d.commands.plots import history_panels, history_png

    t = np.linspace(0, 1, 20)
    series = {
        "forces.c.force.x": 0.01 * t,
        "forces.c.force.z": 1e-17 * t,
        "forces.c.coefficients.x": 3 * t,
        "forces.c.coefficients.y": np.sin(t),
        "forces.c.coefficients.z": 1e-15 * t,
        "differences.dp": -0.1 * t,
    }
    assert history_panels(series) == ["forces.c.coefficients.x", "forces.c.coefficients.y", "differences.dp"]
    history_png(str(tmp_path / "h.png"), t, series, "test")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_the_cavity_in_time(tmp_path):
    """fem3d.cavity --t-end --dt: the steps from rest (no continuation nor sequencing), the centre's
    velocity and pressure per step in history.csv, the time record in summary.json (with the
    Strouhal number of the centre's u: none, three steps are not periodic)."""
    from fem3d import cavity

    out = tmp_path / "cav"
    argv = ["--re", "100", "--n", "3", "--t-end", "0.3", "--dt", "0.1", "--device", "cpu", "--out", str(out)]
    assert cavity.main([*argv, "--no-plots", "--quiet", "--no-vtu"]) == 0
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["t"]) for r in rows] == [0.1, 0.2, 0.3]
    assert float(rows[-1]["points.centre.velocity.x"]) < 0 < float(rows[-1]["newton_steps"])  # the return flow
    summary = json.loads((out / "summary.json").read_text())
    assert summary["time"]["steps"] == 3 and summary["continuation"] == [] and summary["sequence"] == []
    assert summary["quantities"]["points"]["centre"]["velocity"][0] == float(rows[-1]["points.centre.velocity.x"])
    assert summary["time"]["strouhal"] == {
        "of": "points.centre.velocity.x",
        "value": None,
        "period": None,
        "peak": None,
    }
