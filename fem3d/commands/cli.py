"""Command-line options shared by the fem3d entry points: the device and the nonlinear and
linear solvers' settings, declared once on their option classes (gpucfd.options)."""

from __future__ import annotations

from gpucfd.options import add_arguments, build, command_line, given
from ..solvers.linear import LinearOptions
from ..solvers.nonlinear import NonlinearOptions


def add_solver_arguments(ap, suppress: bool = False, **defaults) -> None:
    """--device and one option per setting of NonlinearOptions and LinearOptions; ``defaults``
    are the entry point's (e.g. tol=1e-6), else the classes'. With ``suppress`` a setting not
    given is absent from the namespace (a case file's value stands)."""
    ap.add_argument("--device", default="auto", help="auto, cpu or gpu (default auto: the GPU when CuPy sees one)")
    add_arguments(ap.add_argument_group("nonlinear solver"), NonlinearOptions, defaults, suppress)
    add_arguments(ap.add_argument_group("linear solver"), LinearOptions, defaults, suppress)


def nonlinear_options(args, base: dict | None = None) -> NonlinearOptions:
    """NonlinearOptions from parsed arguments over ``base`` (a case file's values), each error
    naming the option as given on the command line."""
    return build(NonlinearOptions, {**(base or {}), **given(args, NonlinearOptions)}, command_line)


def linear_options(args, base: dict | None = None) -> LinearOptions:
    """LinearOptions from parsed arguments over ``base`` (a case file's values), each error
    naming the option as given on the command line."""
    return build(LinearOptions, {**(base or {}), **given(args, LinearOptions)}, command_line)
