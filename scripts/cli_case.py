"""Run one case of a package command line (python -m <module> ...) and read its summary.json.

Shared by the validation scripts; imported from scripts/ (the folder of the running script).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def run_case(module: str, args: list, out: str, launcher: list = ()) -> tuple:
    """Run ``python -m module *args --out out`` (after ``launcher``, e.g. mpirun -n 2);
    exit with its code unless it is 0 or 3 (not converged, results written). Returns
    (summary dict from out/summary.json, seconds)."""
    cmd = [*launcher, sys.executable, "-m", module, *args, "--out", out]
    print(" ".join([*launcher, *cmd[len(launcher) + 1 :]]), flush=True)  # without the interpreter path
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 3):
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    with open(os.path.join(out, "summary.json")) as fh:
        return json.load(fh), time.perf_counter() - t0
