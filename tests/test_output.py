"""Result files are written atomically, and pictures drawn in a child process fail alone."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import broken_drawings
from gpucfd.errors import InputError
from gpucfd.output import LOCK, atomic_path, check_writable_file, claim_output, save_npy, write_csv, write_json
from fem3d.commands.picture_process import PictureError, draw_in_child


def test_a_writer_failing_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    write_csv(path, ["a", "b"], [[1, 2.5], [3, 4.0]])
    before = path.read_text()
    assert before.splitlines() == ["a,b", "1,2.5", "3,4"]

    def rows():
        yield [5, 6.0]
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        write_csv(path, ["a", "b"], rows())
    assert path.read_text() == before and os.listdir(tmp_path) == ["table.csv"]


def test_atomic_path_replaces_only_on_success(tmp_path):
    path = tmp_path / "summary.json"
    write_json(path, {"converged": True, "change": np.float64(1e-7), "bad": float("nan")})
    assert json.loads(path.read_text()) == {"converged": True, "change": 1e-7, "bad": None}
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(path) as tmp, open(tmp, "w") as fh:
            fh.write('{"conv')  # interrupted mid-write
            raise KeyboardInterrupt
    assert json.loads(path.read_text())["converged"] is True and os.listdir(tmp_path) == ["summary.json"]
    save_npy(tmp_path / "x.npy", np.arange(4.0))
    assert np.load(tmp_path / "x.npy").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert sorted(os.listdir(tmp_path)) == ["summary.json", "x.npy"]


def test_check_writable_file_creates_nothing(tmp_path):
    assert check_writable_file(str(tmp_path / "v.json")) and os.listdir(tmp_path) == []
    with pytest.raises(InputError, match=r"--out .*/missing/v.json is not writable \(No such file or directory\)"):
        check_writable_file(str(tmp_path / "missing" / "v.json"))
    with pytest.raises(InputError, match="is not writable \\(it is a directory\\)"):
        check_writable_file(str(tmp_path))


CAVITY_FILES = ["cavity.vtu", "cavity.pvtu", "cavity_*.vtu", "profiles.csv", "summary.json", "profiles.png"]


def write_lock(folder, pid, host=None):
    (folder / LOCK).write_text(json.dumps({"host": host or socket.gethostname(), "pid": pid}))


def test_a_folder_in_use_by_a_live_process_is_refused_with_one_line(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(tmp_path, sleeper.pid)
        (tmp_path / "cavity_3.vtu").write_text("its piece")
        with pytest.raises(InputError) as info:
            claim_output(str(tmp_path), CAVITY_FILES, option="[output] dir")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert str(info.value) == (
        f"[output] dir {tmp_path} is in use by process {sleeper.pid} (remove {tmp_path / LOCK} if it is gone)"
    )
    assert sorted(os.listdir(tmp_path)) == [LOCK, "cavity_3.vtu"]  # the running process's files untouched
    with claim_output(str(tmp_path / "new")):  # this process holds it: a second claim is refused too
        with pytest.raises(InputError, match=rf"^--out .*new is in use by process {os.getpid()} "):
            claim_output(str(tmp_path / "new"))
    (tmp_path / LOCK).write_text("")  # names no process (being written): refused, never taken over
    with pytest.raises(InputError, match=r"^out= .* is in use by another run \(remove .*/\.lock if it is gone\)$"):
        claim_output(str(tmp_path), option="out=")


def test_a_dead_or_foreign_lock_is_taken_over_and_the_stale_files_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_lock(tmp_path, gone.pid)
    names = ["cavity.pvtu", "cavity_0.vtu", "cavity_3.vtu", ".cavity_1.vtu.x1y2.part.vtu", "summary.json"]
    kept = ["notes.txt", "solution.npy", "flow.vtu", "cavity_3.vtu.bak"]
    for name in names + kept:
        (tmp_path / name).write_text("earlier run")
    (tmp_path / "cavity_9.vtu").mkdir()  # not a file: left alone
    with claim_output(str(tmp_path), [*CAVITY_FILES, "solution.npy"], keep=[str(tmp_path / "solution.npy")]) as c:
        assert c.removed == sorted(names)
        assert json.loads((tmp_path / LOCK).read_text()) == {"host": socket.gethostname(), "pid": os.getpid()}
        assert sorted(os.listdir(tmp_path)) == sorted([LOCK, "cavity_9.vtu", *kept])
    assert sorted(os.listdir(tmp_path)) == sorted(["cavity_9.vtu", *kept])
    write_lock(tmp_path, os.getpid(), host="another-node")  # its processes cannot be checked
    with claim_output(str(tmp_path)) as c:
        assert c.removed == [] and json.loads((tmp_path / LOCK).read_text())["host"] == socket.gethostname()


def test_the_lock_goes_when_the_run_fails_and_a_new_folder_is_made(tmp_path):
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError, match="solver exploded"):
        with claim_output(str(out), CAVITY_FILES):
            assert os.listdir(out) == [LOCK]
            raise RuntimeError("solver exploded")
    assert os.listdir(out) == []
    claim = claim_output(str(out))
    claim.release()
    claim.release()  # once only
    assert os.listdir(out) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"^--out .*/file is not a writable directory \("):
        claim_output(str(tmp_path / "file"))


def test_child_draws_the_picture(tmp_path, child_imports_tests):
    path = tmp_path / "p.txt"
    draw_in_child(broken_drawings.write_text, str(path), text="drawn in a child")
    assert path.read_text() == "drawn in a child" and os.listdir(tmp_path) == ["p.txt"]


@pytest.mark.parametrize(
    "draw, why",
    [
        (broken_drawings.segfault, "the drawing process died of SIGSEGV"),
        (broken_drawings.abort, "the drawing process died of SIGABRT"),
        (broken_drawings.raise_error, "ValueError: no picture of ['plane', 're']"),
        (broken_drawings.write_nothing, "the drawing process wrote nothing"),
    ],
)
def test_a_failing_child_raises_why_and_keeps_the_old_picture(tmp_path, child_imports_tests, draw, why):
    path = tmp_path / "slice.png"
    path.write_bytes(b"old picture")
    with pytest.raises(PictureError) as info:
        draw_in_child(draw, str(path), plane=np.zeros((3, 3)), re=100.0)
    assert str(info.value) == why
    assert path.read_bytes() == b"old picture" and os.listdir(tmp_path) == ["slice.png"]


def test_a_hanging_child_is_stopped(tmp_path, child_imports_tests):
    with pytest.raises(PictureError, match=r"^the drawing process took longer than 1.5 s and was stopped$"):
        draw_in_child(broken_drawings.hang, str(tmp_path / "slice.png"), timeout=1.5)
    assert os.listdir(tmp_path) == []


def test_summary_is_written_before_the_pictures_and_again_to_list_them():
    from tridiag.cases.pictures import summary_then_pictures

    writes = []
    files = summary_then_pictures(["a.csv"], lambda listed: writes.append(list(listed)), lambda: ["b.png"])
    assert files == ["a.csv", "b.png"] and writes == [["a.csv"], ["a.csv", "b.png"]]
    writes.clear()
    assert summary_then_pictures(["a.csv"], lambda listed: writes.append(list(listed)), None) == ["a.csv"]
    assert writes == [["a.csv"]]  # no pictures asked for (or none drawn): one summary
