"""Result files that every entry point writes, each atomically: folders checked for
writing, .npy, CSV and JSON files, and matplotlib without a display."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from contextlib import contextmanager

import numpy as np

from .errors import InputError


def ensure_writable_dir(path: str, option: str = "--out") -> str:
    """Create ``path`` if needed and check that files can be written there (InputError if not)."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):  # unnamed where the system allows: ranks probe the same folder
            pass
    except OSError as exc:
        raise InputError(f"{option} {path} is not a writable directory ({exc.strerror or exc})") from None
    return path


def write_record(stem: str, data, text: str) -> None:
    """A benchmark record: ``stem``.json holding ``data`` and ``stem``.md holding ``text``,
    each written atomically (the folder created if needed)."""
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    with atomic_path(stem + ".json") as tmp, open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    with atomic_path(stem + ".md") as tmp, open(tmp, "w") as fh:
        fh.write(text)


def check_writable_file(path: str, option: str = "--out") -> str:
    """Check that ``path`` can be written atomically (its folder exists and takes new
    files, and it is no folder) without creating it; InputError if not."""
    if os.path.isdir(path):
        raise InputError(f"{option} {path} is not writable (it is a directory)")
    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path))):
            pass
    except OSError as exc:
        raise InputError(f"{option} {path} is not writable ({exc.strerror or exc})") from None
    return path


@contextmanager
def atomic_path(path: str):
    """A temporary file name beside ``path`` to write to; renamed onto ``path`` when the
    block succeeds, removed when it fails, so ``path`` holds either its old content or
    the complete new file, never a partial one (a crash or a kill mid-write loses nothing)."""
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part" + os.path.splitext(name)[1], dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_npy(path: str, array) -> None:
    """``array`` as a .npy file, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(array))


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (figures written to files, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_csv(path: str, header, rows) -> None:
    """Rows (sequences of numbers or strings) under ``header``; floats with 12 significant digits (atomic)."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in rows:
            w.writerow([f"{v:.12g}" if isinstance(v, (float, np.floating)) else v for v in row])


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    return obj


def write_json(path: str, data: dict) -> None:
    """``data`` as indented JSON (NumPy scalars converted, NaN/inf written as null), atomically."""
    text = json.dumps(_jsonable(data), indent=1)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
