"""Ctrl-C (SIGINT) and SIGTERM stop a run cleanly on every rank: one line on stderr, exit code
128 + signal, the last iterate saved as a restartable solution.npy, results marked."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fem3d.parallel.interrupt import Interrupted, InterruptCheck, graceful_stop, requested
from fem3d.parallel.comm import SerialComm
from test_distributed import MPIEXEC, needs_mpiexec

RUN = ["-m", "fem3d.cavity", "--n", "6", "--re", "1000", "--grading", "1", "--device", "cpu", "--no-plots", "--no-vtu"]


def stop_after_first_step(cmd, signum, out):
    """Start ``cmd``, send ``signum`` once it has printed its first nonlinear step, wait."""
    p = subprocess.Popen(cmd + ["--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    for line in p.stdout:
        if "residual" in line:
            p.send_signal(signum)
            break
        assert time.monotonic() - t0 < 120
    stdout, stderr = p.communicate(timeout=120)
    return p.returncode, stderr


def check_stopped(code, stderr, signum, out):
    assert code == 128 + signum
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    name = signal.Signals(signum).name
    # stopped in the first stage (Re 400 of the Re 1000 run): the restart goes on from that stage
    assert lines[0].startswith(f"fem3d.cavity: interrupted by {name} at Re 400 ")
    assert lines[0].endswith(f"continue with --initial {out}/solution.npy --continuation 400")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["converged"] is False and summary["reason"] == f"interrupted ({name})"
    x = np.load(out / "solution.npy")
    assert x.shape == (summary["dofs"],) and np.isfinite(x).all() and np.abs(x).max() >= 1.0  # the lid, at least
    return summary


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_one_process_stops_cleanly(tmp_path, signum):
    code, stderr = stop_after_first_step([sys.executable, *RUN], signum, tmp_path)
    summary = check_stopped(code, stderr, signum, tmp_path)
    # the saved iterate restarts the run
    p = subprocess.run(
        [
            sys.executable,
            *RUN,
            "--re",
            str(summary["continuation"][-1]["re"]),
            "--continuation",
            "none",
            "--max-steps",
            "1",
            "--initial",
            str(tmp_path / "solution.npy"),
            "--out",
            str(tmp_path / "again"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 3 and "not converged (max_steps)" in p.stderr
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["continuation"][0]["steps"][0]["residual"] == pytest.approx(summary["residual"], rel=1e-6)


@needs_mpiexec
def test_every_rank_stops_cleanly(tmp_path):
    code, stderr = stop_after_first_step([MPIEXEC, "-n", "2", sys.executable, *RUN], signal.SIGINT, tmp_path)
    check_stopped(code, stderr, signal.SIGINT, tmp_path)


def test_the_check_raises_once_a_signal_was_recorded():
    check = InterruptCheck(SerialComm(), every=2)
    with graceful_stop():
        check()
        check()
        signal.raise_signal(signal.SIGINT)
        assert requested() == signal.SIGINT
        check()  # looks only at every second call
        with pytest.raises(Interrupted) as exc:
            check()
        assert exc.value.exit_code == 130 and exc.value.signal_name == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_stop_is_honoured_within_one_krylov_iteration():
    """A SIGINT arriving during a linear solve of the API's pipeline: the solve stops at the
    Krylov iteration where it arrived (no further iteration), the run ends marked
    interrupted with its last iterate, and the flow can be solved again."""
    import fem3d

    walls = {tag: fem3d.Wall() for tag in ("x0", "x1", "y0", "z0", "z1")}
    flow = fem3d.Flow(fem3d.box_mesh(3), {"y1": fem3d.Velocity(1, 0, 0), **walls}, re=100.0)
    calls = []

    def progress(iteration, relres):
        calls.append(iteration)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)

    with graceful_stop():
        result = flow.solve(device="cpu", progress=progress)
        assert requested() == signal.SIGINT
    assert len(calls) == 2 and result.reason == "interrupted (SIGINT)" and not result.converged
    assert np.isfinite(result.x).all() and flow.solve(device="cpu").converged
