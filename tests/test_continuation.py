"""Continuation in the Reynolds number (fem3d.solvers.nonlinear.solve_continuation): a stage
out of Newton's reach from the last converged one is split, a bounded number of times."""

from types import SimpleNamespace

import pytest

from fem3d.solvers.nonlinear import (
    BACKOFFS,
    SPLIT_DAMPED,
    SPLIT_STAGNATION,
    NonlinearOptions,
    NonlinearResult,
    solve_continuation,
)


class Reach:
    """A stand-in NonlinearSolver whose Newton reaches a Reynolds number from an iterate solved
    at Re r when re / r <= ``ratio`` (from no iterate: any), else stops with ``reason``; the
    iterate it returns is the Reynolds number it solved."""

    def __init__(self, ratio: float, reason: str = "stagnated"):
        self.ratio, self.reason, self.calls = ratio, reason, []
        self.options, self.stagnation, self.damped = NonlinearOptions(), [], []
        self.system = SimpleNamespace(re=None)

    def solve(self, x0=None, log=None):
        re = self.system.re
        self.calls.append((re, x0, self.options.tol))
        self.stagnation.append(self.options.stagnation)
        self.damped.append(self.options.damped)
        ok = x0 is None or re / x0 <= self.ratio
        return NonlinearResult(re, ok, "converged" if ok else self.reason, 1e-6 if ok else 1e-2)


def test_a_stage_out_of_reach_is_split_and_solved_from_the_last_converged_one():
    solver, lines, saved = Reach(1.6), [], []
    stages = solve_continuation(solver, [400.0], 1000.0, log=lines.append, on_stage=lambda s: saved.append(s.re))
    assert [(s.re, s.result.converged) for s in stages] == [
        (400.0, True),
        (1000.0, False),
        (632.0, True),
        (1000.0, True),
    ]
    assert [(re, x0) for re, x0, _ in solver.calls] == [(400.0, None), (1000.0, 400.0), (632.0, 400.0), (1000.0, 632.0)]
    assert [tol for *_, tol in solver.calls] == [1e-4, 1e-8, 1e-4, 1e-8]  # intermediate stages to CONTINUATION_TOL
    assert saved == [400.0, 632.0, 1000.0] and "Re 1000 stagnated from Re 400: Re 632 first" in lines
    assert solver.stagnation == [
        15,
        SPLIT_STAGNATION,
        SPLIT_STAGNATION,
        SPLIT_STAGNATION,
    ]  # split possible: give up sooner
    assert solver.damped == [0, SPLIT_DAMPED, SPLIT_DAMPED, SPLIT_DAMPED]
    assert solver.options == NonlinearOptions()


def test_splits_are_bounded_and_other_stops_end_the_run():
    solver = Reach(1.01)
    stages = solve_continuation(solver, [400.0], 1000.0)
    assert [s.re for s in stages] == [400.0, 1000.0, 632.0, 503.0] and not stages[-1].result.converged
    assert len(stages) == 2 + BACKOFFS and solver.stagnation == [15, SPLIT_STAGNATION, SPLIT_STAGNATION, 15]
    assert solver.damped == [0, SPLIT_DAMPED, SPLIT_DAMPED, 0]  # no split left: Newton may take damped steps
    for reason in ("max_steps", "nan"):  # not out of Newton's reach: no split
        assert [s.re for s in solve_continuation(Reach(1.01, reason), [400.0], 1000.0)] == [400.0, 1000.0]
    assert [s.re for s in solve_continuation(Reach(1.01), [], 1000.0, x0=10.0)] == [1000.0]  # nothing converged yet


@pytest.mark.parametrize("ratio", [3.0, 1.6])
def test_a_reachable_plan_is_solved_as_given(ratio):
    solver = Reach(ratio)
    assert [s.re for s in solve_continuation(solver, [400.0, 632.0], 1000.0)] == [400.0, 632.0, 1000.0]
