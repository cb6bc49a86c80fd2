"""Settings declared once. A field of an options dataclass made by :func:`setting` carries its
range or choices and its help; the command line (:func:`add_arguments`), a case file's table
and the Python API fill the same dataclass (:func:`build`), and an error names the setting as
the user gave it: ``--smoothing-steps`` on the command line, ``[solver] smoothing_steps`` in
a case file, ``smoothing_steps=`` in Python (:data:`API`, :func:`command_line`, :func:`table`).

A dataclass validates itself with :func:`validate` in its ``__post_init__``; :func:`build`
sets the spelling of its errors for that construction.
"""

from __future__ import annotations

import argparse
import contextvars
import math
from dataclasses import MISSING, Field, dataclass, field, fields

from .errors import InputError, check_range, shown


@dataclass(frozen=True)
class Rule:
    """What a setting accepts: a number in [low, high] (open ends with ``low_open`` and
    ``high_open``; an integer with ``integer``; infinity also with ``infinite``) or one of
    ``choices`` (strings); None also with ``optional``. ``flag``: its command-line name where
    that is not the field's (``--max-linear`` for max_iterations); ``help``: one line for the
    command line, without the default."""

    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    infinite: bool = False
    optional: bool = False
    choices: tuple | None = None
    flag: str | None = None

    def check(self, name: str, value):
        """``value`` as the setting holds it (a Python int, float or str); InputError naming ``name``."""
        if value is None and self.optional:
            return None
        if self.choices is not None:
            if not isinstance(value, str) or value not in self.choices:
                raise InputError(f"{name} must be one of {', '.join(self.choices)} (got {shown(value)})")
            return value
        if self.infinite and not isinstance(value, bool) and _is_inf(value):
            return math.inf
        check_range(
            name,
            value,
            low=self.low,
            high=self.high,
            low_open=self.low_open,
            high_open=self.high_open,
            integer=self.integer,
        )
        return int(value) if self.integer else float(value)


def _is_inf(value) -> bool:
    try:
        return float(value) == math.inf
    except (TypeError, ValueError, OverflowError):
        return False


def setting(default, help: str, **rule) -> Field:
    """A dataclass field holding a setting (``rule``: :class:`Rule`'s keywords)."""
    return field(default=default, metadata={"rule": Rule(help, **rule)})


def rules(cls) -> dict:
    """{field name: Rule} of the settings of the dataclass ``cls``."""
    return {f.name: f.metadata["rule"] for f in fields(cls) if "rule" in f.metadata}


def flag_of(name: str, rule: Rule) -> str:
    """The command-line option of a setting: ``--max-linear``, ``--smoothing-steps``."""
    return rule.flag or "--" + name.replace("_", "-")


def key_of(name: str, rule: Rule) -> str:
    """The case-file key of a setting: its command-line name with underscores (max_linear)."""
    return flag_of(name, rule)[2:].replace("-", "_")


def API(name: str, rule: Rule) -> str:  # noqa: N802 - a constant-like spelling
    """The Python spelling of a setting: ``smoothing_steps=``."""
    return f"{name}="


def command_line(name: str, rule: Rule) -> str:
    """The command-line spelling of a setting: ``--smoothing-steps``."""
    return flag_of(name, rule)


def table(section: str):
    """The case-file spelling of the settings of ``[section]``: ``[solver] smoothing_steps``."""
    return lambda name, rule: f"[{section}] {key_of(name, rule)}"


_SPELLING = contextvars.ContextVar("spelling", default=API)


def spelt(name: str, options) -> str:
    """How the user spelt the setting ``name`` of the dataclass instance ``options``: as it
    was built (:func:`build`), or in the construction under way."""
    spelling = options.__dict__.get("_spelling") or _SPELLING.get()
    return spelling(name, rules(type(options))[name])


def validate(options) -> None:
    """Check every setting of the dataclass instance ``options`` and store it as its rule
    holds it (NumPy scalars become Python numbers); InputError in the current spelling."""
    spell = _SPELLING.get()
    for name, rule in rules(type(options)).items():
        setattr(options, name, rule.check(spell(name, rule), getattr(options, name)))


def build(cls, values: dict, spelling=API):
    """``cls(**values)``, its errors in ``spelling`` (:func:`command_line`, ``table(section)``
    or :data:`API`)."""
    token = _SPELLING.set(spelling)
    try:
        options = cls(**values)
    finally:
        _SPELLING.reset(token)
    options.__dict__["_spelling"] = spelling  # for later errors about it (not a field: asdict leaves it out)
    return options


def from_table(cls, data: dict, section: str, known: set) -> dict:
    """The values of ``cls``'s settings in the case-file table ``data`` of ``[section]``, by
    case-file key, checked in that spelling ({field name: value}); ``known`` collects the keys
    taken."""
    spell, out = table(section), {}
    for name, rule in rules(cls).items():
        key = key_of(name, rule)
        if key in data:
            out[name] = rule.check(spell(name, rule), data[key])
            known.add(key)
    return out


def add_arguments(group, cls, defaults: dict | None = None, suppress: bool = False) -> None:
    """One command-line option per setting of ``cls`` in the argparse ``group``, with its
    default (``defaults`` overriding the dataclass's) in the help; with ``suppress`` an option
    not given is absent from the parsed namespace (the caller's other source fills it)."""
    defaults = defaults or {}
    for f in fields(cls):
        rule = f.metadata.get("rule")
        if rule is None:
            continue
        default = defaults.get(f.name, f.default if f.default is not MISSING else None)
        kind = str if rule.choices is not None else int if rule.integer and not rule.infinite else float
        shown = "" if default is None else f" (default {default:g})" if kind is float else f" (default {default})"
        group.add_argument(
            flag_of(f.name, rule),
            dest=f.name,
            metavar=key_of(f.name, rule).upper(),
            type=kind,
            default=argparse.SUPPRESS if suppress else default,
            help=rule.help + shown,
        )


def given(namespace, cls) -> dict:
    """{field name: value} of ``cls``'s settings present in the parsed ``namespace``."""
    return {name: getattr(namespace, name) for name in rules(cls) if hasattr(namespace, name)}
