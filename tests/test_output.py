"""Result files are written atomically, and pictures drawn in a child process fail alone."""

import json
import os

import numpy as np
import pytest

import broken_drawings
from gpucfd.errors import InputError
from gpucfd.output import atomic_path, check_writable_file, save_npy, write_csv, write_json
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
