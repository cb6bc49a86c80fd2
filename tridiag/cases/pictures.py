"""PNG pictures of a run, drawn after its results are safely written.

A picture that fails to render (matplotlib missing, a backend error, a full disk) must not cost
the run its results or its exit code: it becomes a one-line warning on stderr.
"""

from __future__ import annotations

import os
import sys

from gpucfd.output import atomic_path


def draw(out: str, pictures: list, prog: str) -> list:
    """Render each (file name, draw) of ``pictures`` into folder ``out``: ``draw(path)`` writes the
    PNG to ``path`` (a temporary name, renamed onto out/name when complete). Returns the names
    drawn; each failure prints ``prog: warning: NAME not drawn (...)`` to stderr instead."""
    drawn = []
    for name, render in pictures:
        try:
            with atomic_path(os.path.join(out, name)) as tmp:
                render(tmp)
            drawn.append(name)
        except Exception as exc:  # any rendering failure: the results stand
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            print(f"{prog}: warning: {name} not drawn ({detail})", file=sys.stderr, flush=True)
    return drawn


def summary_then_pictures(files: list, write_summary, draw_pictures) -> list:
    """The order of a run's last writes: ``write_summary(files)`` lists the results already
    written, then ``draw_pictures()`` (None: pictures not asked for) returns the pictures drawn,
    and the summary is written again to list them too. Returns all the files."""
    write_summary(files)
    pictures = draw_pictures() if draw_pictures is not None else []
    if pictures:
        files = files + pictures
        write_summary(files)
    return files
