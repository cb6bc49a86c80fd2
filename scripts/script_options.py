"""Checks of the options the scripts share: lists of numbers or names, and the tag of the result files.

Imported from scripts/ (the folder of the running script); errors are gpucfd.errors.InputError,
printed as one line with exit code 2 by gpucfd.errors.run_cli.
"""

from __future__ import annotations

import re

from gpucfd.errors import InputError, check_range


def check_each(name: str, values, low=None, high=None, integer: bool = False, low_open: bool = False) -> list:
    """``values`` (a list given with nargs), each checked by check_range, and at least one."""
    if not values:
        raise InputError(f"{name} needs at least one value")
    return [check_range(name, v, low, high, low_open=low_open, integer=integer) for v in values]


def check_names(name: str, values, allowed) -> list:
    """``values``, each one of ``allowed``, and at least one."""
    if not values:
        raise InputError(f"{name} needs at least one value")
    for v in values:
        if v not in allowed:
            raise InputError(f"{name} must be one of {', '.join(allowed)} (got {v!r})")
    return list(values)


def check_line_solvers(name: str, entries) -> list:
    """``entries`` of the form SOLVER or SOLVER:LAYOUT (tridiag.cases.line_solver names, e.g. "pta:contiguous"),
    each checked, and at least one; returns (entry, solver, layout) triples."""
    from tridiag.cases.line_solver import check_solver

    if not entries:
        raise InputError(f"{name} needs at least one value")
    out = []
    for entry in entries:
        solver, _, layout = entry.partition(":")
        check_solver(solver, layout or "auto")
        out.append((entry, solver, layout or "auto"))
    return out


def check_tag(tag: str) -> str:
    """A suffix of result file names: letters, digits, '.', '_' and '-' only."""
    if not re.fullmatch(r"[A-Za-z0-9._-]*", tag):
        raise InputError(f"--tag may hold letters, digits, '.', '_' and '-' only (got {tag!r})")
    return tag
