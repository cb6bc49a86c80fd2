"""Pictures drawn in a child process, so that a crash in a plotting library (a
segmentation fault in native code, a hang) cannot take the run and its results with it.

The parent sends the drawing function (by reference: its module and name) and its
arguments, pickled, on the child's standard input; the child calls it with a temporary
file beside the picture, which the parent renames onto the picture once the child
succeeded (gpucfd.output.atomic_path). ``python -m fem3d.commands.picture_process PATH`` is the child.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys

from gpucfd.output import atomic_path

CHILD = [sys.executable, "-m", "fem3d.commands.picture_process"]
TIMEOUT_S = 300.0  # a picture of the default run takes about 2 s


class PictureError(RuntimeError):
    """The child process drawing a picture failed, crashed or ran out of time."""


def draw_in_child(draw, path: str, timeout: float = TIMEOUT_S, **data) -> None:
    """``draw(path, **data)`` in a child Python process, writing ``path`` atomically.

    ``draw`` is a module-level function and ``data`` picklable (arrays, dicts, numbers).
    Raises PictureError saying why when the child exits with an error (its last line on
    stderr), dies of a signal, writes nothing or takes longer than ``timeout`` seconds;
    ``path`` then keeps its old content, if any.
    """
    job = pickle.dumps((draw, data))
    with atomic_path(path) as tmp:
        try:
            child = subprocess.run([*CHILD, tmp], input=job, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PictureError(f"the drawing process took longer than {timeout:g} s and was stopped") from None
        if child.returncode < 0:
            raise PictureError(f"the drawing process died of {signal.Signals(-child.returncode).name}")
        if child.returncode != 0:
            lines = child.stderr.decode(errors="replace").strip().splitlines()
            raise PictureError(lines[-1] if lines else f"the drawing process exited with code {child.returncode}")
        if os.path.getsize(tmp) == 0:
            raise PictureError("the drawing process wrote nothing")


def _child(path: str) -> None:
    draw, data = pickle.load(sys.stdin.buffer)
    draw(path, **data)


if __name__ == "__main__":
    _child(sys.argv[1])
