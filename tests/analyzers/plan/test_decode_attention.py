"""Decode attention priced by what a call does: KV elements read, query elements, scores, threads."""

import dataclasses
import random

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.decode_attention import DecodeAttentionCost, DecodeCall
from analyzers.plan.profile import CollectiveCost, LinearCost, MachineProfile, Roofline
from analyzers.plan.step_model import StepModel, StepShape

MIB = 1 << 20


def _calls(truth: DecodeAttentionCost, layouts, threads: int, rng: random.Random) -> list[DecodeCall]:
    out = []
    for heads, kv_heads, head_dim in layouts:
        for batch in (1, 8, 32):
            for ctx in (64, 512, 2048):
                kv, scores = 2.0 * batch * ctx * kv_heads * head_dim, float(batch) * ctx * heads
                t = truth.seconds(kv, scores * head_dim, scores, threads) * rng.uniform(0.98, 1.02)
                out.append(DecodeCall(kv, scores * head_dim, scores, truth.threads_for(kv, threads), t))
    return out


def test_the_fit_recovers_each_price_and_the_split_from_three_layouts():
    truth = DecodeAttentionCost(2e-5, 2.5e-10, 6e-11, 8e-9, split_bytes=32 * MIB, split_efficiency=0.7)
    calls = _calls(truth, CalibrationGrid().decode_layouts, threads=2, rng=random.Random(0))
    assert {c.threads for c in calls} == {1, 2}  # the grid's biggest calls split, as the kernel's would
    fit = DecodeAttentionCost.fit(calls, split_bytes=32 * MIB)
    for name in ("fixed_s", "per_kv_element_s", "per_query_element_s", "per_score_s", "split_efficiency"):
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), rel=0.15), name
    # A layout the fit never saw (no GQA, head dim 128) is priced within the noise.
    kv, scores = 2.0 * 16 * 700 * 8 * 128, 16.0 * 700 * 8
    assert fit.seconds(kv, scores * 128, scores, 2) == pytest.approx(
        truth.seconds(kv, scores * 128, scores, 2), rel=0.05
    )


def test_a_price_per_kv_element_alone_misprices_another_gqa_ratio_and_the_two_terms_do_not():
    """The defect the two terms fix: fitted at 4 query heads per KV head, one price per KV element
    over-prices a model without GQA (each KV element serves one query head, not four)."""
    truth = DecodeAttentionCost(2e-5, 2.5e-10, 2.5e-10)
    at_one_ratio = _calls(truth, [(16, 4, 64)], threads=1, rng=random.Random(1))
    xs, ys = [c.kv_elements for c in at_one_ratio], [c.seconds for c in at_one_ratio]
    one_price = LinearCost.fit(xs, ys)
    kv, scores = 2.0 * 16 * 512 * 8 * 64, 16.0 * 512 * 8  # 8 heads, 8 KV heads
    actual = truth.seconds(kv, scores * 64, scores, 1)
    assert one_price.seconds(kv) > 1.4 * actual
    both = DecodeAttentionCost.fit(_calls(truth, CalibrationGrid().decode_layouts, 1, random.Random(2)), 0)
    assert both.seconds(kv, scores * 64, scores, 1) == pytest.approx(actual, rel=0.05)


def test_a_call_splits_one_thread_per_split_bytes_of_context_up_to_the_ranks_threads():
    cost = DecodeAttentionCost(0.0, 1e-9, split_bytes=32 * MIB, split_efficiency=0.5)
    elements = 64 * MIB / 4  # 64 MiB of float32 context
    assert [cost.threads_for(elements, t) for t in (0, 1, 2, 8)] == [1, 1, 2, 2]
    assert cost.seconds(elements, 0, 0, 2) == pytest.approx(1e-9 * elements / 1.5)
    assert DecodeAttentionCost(0.0, 1e-9).threads_for(elements, 8) == 1  # no split rule: the torch path


def test_an_older_profiles_price_per_kv_element_reads_as_the_kv_price_alone():
    old = {"fixed_s": 2e-5, "per_unit_s": 4e-10, "lo": 100.0, "hi": 1e7}
    cost = DecodeAttentionCost.from_dict(old)
    assert (cost.per_kv_element_s, cost.per_query_element_s, cost.per_score_s, cost.split_bytes) == (4e-10, 0, 0, 0)
    notes: set[str] = set()
    assert cost.seconds(2e7, 1.0, 1.0, 2, notes) == pytest.approx(2e-5 + 4e-10 * 2e7)
    assert any("beyond the measured" in n for n in notes)


def test_the_step_model_prices_a_models_decode_attention_by_its_own_layout():
    """tiny (16 heads, 4 KV heads) against the same with 16 KV heads: 4x the KV read, the same query work."""
    cost = DecodeAttentionCost(0.0, 1e-10, 3e-10, 0.0)
    profile = MachineProfile(
        name="t",
        source="measured",
        dtype_bytes=4,
        roofline=Roofline(1e12, 1e11, 1.0, 1.0, 0.0),
        step_overhead=LinearCost(0.0, 0.0),
        collective=CollectiveCost(0.0, 1e9),
        attention_decode=cost,
    )
    tiny = resolve_model("tiny")
    no_gqa = dataclasses.replace(tiny, num_kv_heads=tiny.num_heads)
    step = StepShape(((1, 512),) * 8, 8)
    parts = [StepModel(s, profile).step_cost(step).parts["attention"] for s in (tiny, no_gqa)]
    kv, query = 2 * 8 * 512 * 4 * 64, 8 * 512 * 16 * 64
    per_layer = [1e-10 * kv + 3e-10 * query, 1e-10 * 4 * kv + 3e-10 * query]
    assert parts == pytest.approx([tiny.num_layers * p for p in per_layer])


def test_the_grid_refuses_layouts_that_cannot_separate_the_three_prices():
    with pytest.raises(DiagnosisError, match="three independent mixes"):
        CalibrationGrid(decode_layouts=((16, 4, 64), (8, 2, 64)))  # the same mix, scaled
    with pytest.raises(DiagnosisError, match="multiple of"):
        CalibrationGrid(decode_layouts=((16, 5, 64), (8, 8, 64), (16, 8, 16)))


def test_a_fit_needs_enough_one_thread_calls():
    with pytest.raises(DiagnosisError, match="four one-thread calls"):
        DecodeAttentionCost.fit([DecodeCall(1.0, 1.0, 1.0, 1, 1e-5)] * 3, 0)
