"""Wake measures (tridiag.cases.wake) against signals and profiles with known answers."""

import numpy as np
import pytest

from gpucfd.errors import InputError
from tridiag.cases.wake import recirculation_length, shedding


def test_shedding_frequency_of_a_sampled_sine_with_transient():
    t = np.arange(0.0, 200.0, 0.05)
    f = 0.1437
    signal = 0.3 + 0.8 * np.sin(2 * np.pi * f * t + 0.4) + np.exp(-t / 5)  # decaying start-up
    s = shedding(t, signal)
    assert s.frequency == pytest.approx(f, rel=2e-4)
    assert s.periods >= 13
    assert s.spread < 2e-3
    assert s.amplitude == pytest.approx(0.8, rel=1e-2)


def test_shedding_is_none_for_a_steady_or_short_signal():
    t = np.linspace(0, 50, 1001)
    assert shedding(t, 1.0 + 1e-3 * np.exp(-t)) is None
    assert shedding(t, np.sin(2 * np.pi * 0.02 * t)) is None  # one period in the second half
    with pytest.raises(InputError, match="t and signal"):
        shedding(t, t[:-1])


def test_recirculation_length_of_a_linear_wake_profile():
    x = np.linspace(0.0, 10.0, 101)
    u = np.where(x < 2.0, 0.0, 0.5 * (x - 4.37))  # body up to x = 2, reattachment at 4.37
    assert recirculation_length(x, u, x_rear=2.0) == pytest.approx(2.37, abs=1e-12)


def test_recirculation_length_is_none_without_reversed_flow_or_reattachment():
    x = np.linspace(0.0, 10.0, 101)
    assert recirculation_length(x, np.ones_like(x), 2.0) is None
    assert recirculation_length(x, -np.ones_like(x), 2.0) is None
