"""Drawing functions that fail the way a plotting library can, for fem3d.commands.picture_process
to run in its child (which imports this module: fixture child_imports_tests)."""

import ctypes
import os
import time


def segfault(path, **data):
    """Read address 0, as VTK's evenly spaced streamlines read outside their grid."""
    ctypes.string_at(0)


def abort(path, **data):
    os.abort()


def raise_error(path, **data):
    raise ValueError(f"no picture of {sorted(data)}")


def hang(path, **data):
    time.sleep(60)


def write_nothing(path, **data):
    """Return without writing ``path``."""


def write_text(path, text):
    with open(path, "w") as fh:
        fh.write(text)
