"""bench/goodput_ranking.py: a layout's goodput is its best level within the SLO; rankings compared pair by pair."""

from bench.goodput_ranking import goodput, model_slo, rank_layouts


def _level(lid, ttft99, tpot95, tok_s):
    values = {"ttft_p99_s": ttft99, "tpot_p95_s": tpot95, "output_tok_s": tok_s}
    return {"level_id": lid, "measured": values, "predicted": dict(values)}


def _case(layout, levels, predicted_tok_s=None):
    levels = [dict(lv) for lv in levels]
    if predicted_tok_s:  # the prediction's throughput per level, its latencies as measured
        for lv, tok in zip(levels, predicted_tok_s):
            lv["predicted"] = {**lv["predicted"], "output_tok_s": tok}
    return {"model": "m", "layout": layout, "calibrated": {"levels": levels}, "fitted": {"levels": levels}}


TP1 = [_level("c1-in128-out64", 0.01, 0.002, 400), _level("c16-in128-out64", 0.2, 0.008, 2000)]
TP2 = [_level("c1-in128-out64", 0.02, 0.004, 200), _level("c16-in128-out64", 0.02, 0.005, 900)]


def test_goodput_is_the_best_level_within_the_slo():
    assert goodput(TP1, "measured", 128, None) == 2000
    assert goodput(TP1, "measured", 128, (0.03, 0.006)) == 400  # c16 breaks TTFT and TPOT
    assert goodput(TP1, "measured", 512, None) == 0.0  # no level at that input length
    assert model_slo([_case("tp1", TP1)], 128) == (0.03, 0.006)  # 3 x TP1's c1


def test_rankings_agree_or_not_pair_by_pair():
    agree = rank_layouts([_case("tp1", TP1), _case("tp2", TP2)])
    no_slo = next(r for r in agree if r["slo"] is None)
    assert no_slo["measured_order"] == ["tp1", "tp2"] and no_slo["calibrated"]["pairs_agree"] == 1
    with_slo = next(r for r in agree if r["slo"] is not None)
    assert with_slo["measured"] == {"tp1": 400, "tp2": 900} and with_slo["measured_order"] == ["tp2", "tp1"]
    # A prediction that puts TP2's c16 above TP1's when the runs say otherwise disagrees.
    wrong = rank_layouts([_case("tp1", TP1, [400, 800]), _case("tp2", TP2, [200, 900])])
    assert next(r for r in wrong if r["slo"] is None)["calibrated"]["pairs_agree"] == 0


def test_a_level_the_measurement_has_no_rate_for_is_ranked_on_neither_side():
    """A window shorter than its requests measured no rate (output_tok_s None): the prediction of that
    level must not decide the layout's goodput either, or the two sides rank different level sets."""
    unmeasured = {
        "level_id": "c16-in128-out64",
        "measured": {"ttft_p99_s": 0.2, "tpot_p95_s": 0.008, "output_tok_s": None},
        "predicted": {"ttft_p99_s": 0.2, "tpot_p95_s": 0.008, "output_tok_s": 5000},
    }
    levels = [TP1[0], unmeasured]
    assert goodput(levels, "measured", 128, None) == 400
    assert goodput(levels, "predicted", 128, None) == 400
