"""A simulated level's window is sized by the sweep's own rules (docs/metrics.md, "Sizing a level")."""

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.simulate import LoadSpec, random_prompt
from analyzers.plan.window import LevelWindow, WindowSizing
from tests.analyzers.plan.test_simulate import _sim


def test_a_steady_warm_up_starts_the_window_once_every_user_is_warm_and_never_before_the_minimum():
    w = LevelWindow(2.0, 5.0, WindowSizing(steady_warmup=True, max_duration_s=60.0, lead_s=0.5))
    assert (w.lo, w.hi) == (60.0, 65.0) and not w.contains(1.0)  # provisional: at the bound
    w.every_user_warm(0.5)
    assert (w.lo, w.hi, w.warmup_end) == (2.0, 7.0, "steady")  # the minimum warm-up still holds
    late = LevelWindow(2.0, 5.0, WindowSizing(steady_warmup=True, max_duration_s=60.0, lead_s=0.5))
    late.every_user_warm(11.0)
    assert (late.lo, late.hi) == (11.5, 16.5)


def test_a_sized_window_ends_at_its_sample_target_but_not_before_its_minimum():
    w = LevelWindow(2.0, 5.0, WindowSizing(sample_target=100, max_duration_s=60.0))
    assert w.hi == 62.0
    w.holds(3.0, 99)
    assert w.hi == 62.0
    w.holds(3.0, 100)
    assert (w.hi, w.window_end_by) == (7.0, "samples")  # at least the minimum duration
    w.holds(5.0, 500)
    assert w.hi == 7.0  # decided once


def test_sizing_needs_a_bound():
    with pytest.raises(DiagnosisError):
        WindowSizing(steady_warmup=True)


@pytest.mark.slow  # moved out of the default suite (its 10-minute budget); .ci/run runs it
def test_a_simulated_level_whose_first_wave_outlasts_a_fixed_warm_up_measures_later_waves_when_sized():
    lengths = lambda i: (random_prompt(512, 0, i), 32)
    first_wave_done = max(
        r.t_done for r in _sim(4).run(LoadSpec(0.0, 1e-9, concurrency=16), lengths).records[:16] if r.t_done
    )
    sized = _sim(4).run(
        LoadSpec(0.1, 2.0, concurrency=16, sizing=WindowSizing(steady_warmup=True, max_duration_s=600.0)), lengths
    )
    assert sized.window[0] >= first_wave_done
    assert sized.in_window and all(r.t_sent >= first_wave_done for r in sized.in_window)
    fixed = _sim(4).run(LoadSpec(0.1, 2.0, concurrency=16), lengths)
    assert fixed.window == (0.1, 2.1)


def test_a_window_sized_with_no_lead_keeps_the_request_that_reached_its_target():
    """With no announce lead (the plan's own ranking), the request that brings the count to the target is
    sent at the decision's moment: it stays in the window, and the simulation ends once the window's
    requests are done (counted in and dropped, it was never finished: the run went on to its drain limit)."""
    w = LevelWindow(0.0, 1.0, WindowSizing(sample_target=3, max_duration_s=60.0))
    w.holds(4.0, 3)
    assert w.contains(4.0) and not w.contains(4.001)
    lengths = lambda i: (random_prompt(64, 0, i), 8)
    sized = WindowSizing(steady_warmup=True, sample_target=40, max_duration_s=600.0)
    result = _sim(4).run(LoadSpec(0.1, 0.2, concurrency=4, sizing=sized), lengths)
    assert len(result.in_window) == 40 and all(r.t_done is not None for r in result.in_window)
    last_done = max(r.t_done for r in result.in_window)
    assert max(r.t_sent for r in result.records) <= last_done  # nobody sent after the window's last finished
