"""The code follows the project's style: ``ruff check`` and ``ruff format --check`` pass on the
whole repository with the configuration of pyproject.toml ([tool.ruff]: line length 120,
rules E, F, W). Ruff comes with the ``test`` extra; a missing ruff fails here rather than
skipping, so that the check cannot go quiet."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(command):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        pytest.fail(f"ruff {' '.join(command)} (exit {done.returncode}):\n{done.stdout}{done.stderr}", pytrace=False)
