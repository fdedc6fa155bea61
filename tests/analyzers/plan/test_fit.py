"""The fit's least squares: known efficiency factors are recovered from the levels they produced."""

import pytest

from analyzers.plan.fit import nonneg_line, solve_factors


def test_solve_factors_recovers_scale_and_overheads():
    s, a, b = 0.5, 1e-3, 2e-4
    # Operator time and batch vary apart (long prompts at low load, short at high): all three are decided.
    points = [(c, batch, s * c + a + b * batch) for c, batch in ((8e-3, 1), (2e-3, 4), (9e-3, 8), (3e-3, 16))]
    got = solve_factors(points, a=0.0, b=0.0)  # a prior far from the truth
    assert got == pytest.approx((s, a, b), rel=0.15)


def test_fixed_scale_moves_only_the_overheads_and_nothing_goes_negative():
    points = [(1e-3, 1, 1.5e-3), (1e-3, 8, 3e-3)]
    s, a, b = solve_factors(points, a=1e-3, b=1e-4, fit_scale=False)
    assert s == 1.0 and a >= 0 and b > 0
    assert 1e-3 + a + 8 * b == pytest.approx(3e-3, rel=0.1)
    # Faster than the operators alone: the overheads stop at zero rather than go negative.
    assert solve_factors([(5e-3, 1, 1e-3), (5e-3, 4, 1e-3)], 1e-3, 0.0, fit_scale=False)[1:] == (0.0, 0.0)


def test_nonneg_line():
    assert nonneg_line([(1, 3.0), (3, 7.0)]) == pytest.approx((1.0, 2.0))
    assert nonneg_line([(1, 5.0), (3, 1.0)]) == (3.0, 0.0)  # a falling line is a constant
    assert nonneg_line([(2, 4.0)]) == (4.0, 0.0)


def test_a_fit_that_misses_its_own_levels_is_said_not_to_be_trusted():
    from analyzers.plan.sweep_prediction import fit_warning

    # tiny-test at PP2 (bench/RESULTS.md): fitted c1 +2% and c16 +97% TPOT P50, a median of 49.5%.
    failed = {"fitted": {"tpot_p50_s": 0.495, "output_tok_s": 0.24}, "predicted": {"tpot_p50_s": 5.4}}
    words = fit_warning(failed)
    assert words is not None and "TPOT P50 by a median 50%" in words and "not to be trusted" in words
    assert fit_warning({"fitted": {"tpot_p50_s": 0.03, "output_tok_s": 0.01}}) is None
    assert fit_warning({"predicted": {"tpot_p50_s": 0.9}}) is None  # no fit: nothing to judge
    assert fit_warning({"fitted": {"tpot_p50_s": None, "output_tok_s": 0.4}}) is not None
