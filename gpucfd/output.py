"""Result files that every entry point writes, each atomically: folders checked for
writing and claimed for one run, .npy, CSV and JSON files, and matplotlib without a display."""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import socket
import tempfile
from contextlib import contextmanager, suppress

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


LOCK = ".lock"  # the file in an output folder naming the run that writes there


class OutputClaim:
    """A run's hold on its output folder (:func:`claim_output`): a context manager whose
    end, or :meth:`release`, removes the lock, also after an exception. ``removed``: the
    names of the earlier run's files that the claim removed."""

    def __init__(self, path: str, lock: str, mine: dict, removed: list[str]):
        self.path, self.lock, self.removed = path, lock, removed
        self._mine = mine

    def release(self) -> None:
        """Remove the lock if it is still this run's (a later call does nothing)."""
        if self._mine is not None and _holder(self.lock) == self._mine:
            with suppress(FileNotFoundError):
                os.remove(self.lock)
        self._mine = None

    def __enter__(self) -> "OutputClaim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim_output(path: str, stale=(), keep=(), option: str = "--out") -> OutputClaim:
    """Claim the folder ``path`` for one run: create it if needed (InputError if it cannot be
    written), refuse it while its lock file ``.lock`` names a live process of this host
    (InputError, one line naming ``option``, the user's spelling of the folder: "--out",
    "[output] dir"), else write the lock (host name and process id; O_CREAT|O_EXCL, so two
    runs cannot both create it), then remove the earlier run's files matching the glob
    patterns ``stale`` (names in the folder, e.g. "flow_*.vtu", and the temporaries an
    interrupted atomic write left of them) except the paths ``keep`` (e.g. the --initial
    being read). Other files (a user's notes) stay.

    A lock whose process is gone, or that names another host (whose processes cannot be
    checked), is taken over: a crash leaves nothing stuck. Two runs taking over one dead
    lock at the same instant are not told apart. Under MPI rank 0 alone claims, before any
    rank writes there, and the caller agrees the error over the ranks
    (fem3d.parallel.comm.agreed_errors)."""
    ensure_writable_dir(path, option)
    lock = os.path.join(path, LOCK)
    mine = {"host": socket.gethostname(), "pid": os.getpid()}
    for _ in range(3):  # each pass fails only where another run created or removed the lock meanwhile
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is not None and _alive(holder):
                who = f"process {holder['pid']}" if holder else "another run"
                raise InputError(f"{option} {path} is in use by {who} (remove {lock} if it is gone)") from None
            if holder is not None:
                _remove(lock, option, path)
            continue
        except OSError as exc:
            raise InputError(f"{option} {path}: cannot create {lock} ({exc.strerror or exc})") from None
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(mine))
        except OSError as exc:  # a full disk: no empty lock left behind
            _remove(lock, option, path)
            raise InputError(f"{option} {path}: cannot write {lock} ({exc.strerror or exc})") from None
        break
    else:
        raise InputError(f"{option} {path} is in use by another run (remove {lock} if it is gone)")
    claim = OutputClaim(path, lock, mine, [])
    try:
        keep = {os.path.realpath(k) for k in (*keep, lock)}
        for pattern in stale:
            for name in (pattern, f".{pattern}.*.part*"):  # atomic_path's temporaries of the pattern's files
                for file in glob.glob(os.path.join(glob.escape(path), name)):
                    if os.path.isfile(file) and os.path.realpath(file) not in keep:
                        _remove(file, option, path)
                        claim.removed.append(os.path.basename(file))
    except BaseException:
        claim.release()
        raise
    claim.removed.sort()
    return claim


def _holder(lock: str) -> dict | None:
    """The {"host", "pid"} a lock file names; {} when it names none (being written, or not
    ours); None when there is no lock."""
    try:
        with open(lock) as fh:
            holder = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    ok = isinstance(holder, dict) and isinstance(holder.get("pid"), int) and isinstance(holder.get("host"), str)
    return {"host": holder["host"], "pid": holder["pid"]} if ok else {}


def _alive(holder: dict) -> bool:
    """Whether the lock's process runs: True for a lock naming no process (it may be being
    written), False for another host's."""
    if not holder:
        return True
    if holder["host"] != socket.gethostname() or holder["pid"] <= 0:
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove(file: str, option: str, path: str) -> None:
    try:
        os.remove(file)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot remove {file} ({exc.strerror or exc})") from None


def write_record(stem: str, data, text: str) -> None:
    """A benchmark record: ``stem``.json holding ``data`` and ``stem``.md holding ``text``,
    each written atomically (the folder created if needed)."""
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    with atomic_path(stem + ".json") as tmp, open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    with atomic_path(stem + ".md") as tmp, open(tmp, "w") as fh:
        fh.write(text)


def saved_record(stem: str) -> tuple[list, list]:
    """(rows, commands) of the benchmark record ``stem``.json that write_record saved (an older
    record's single "command" as a list of one), for rows added to it."""
    with open(stem + ".json") as fh:
        saved = json.load(fh)
    return saved["rows"], saved.get("commands", [saved.get("command")])


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
