"""A level simulated with several seeds: their window requests pooled (analyzers/plan/predict.py)."""

import dataclasses
import itertools
import random

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.predict import LevelLoad, predict_level, summarize
from analyzers.plan.profile import LinearCost
from analyzers.plan.request_overhead import RequestOverhead
from analyzers.plan.simulate import LoadSpec, Simulator, random_prompt
from analyzers.plan.step_model import StepModel
from refengine.config import CacheConfig, SchedulerConfig


def _sim() -> Simulator:
    """tiny-test on a published profile with a request overhead: its draws differ by seed."""
    profile = dataclasses.replace(published_profile("h100"), step_overhead=LinearCost(2e-3, 1e-4))
    return Simulator(
        StepModel(resolve_model("tiny-test"), profile),
        SchedulerConfig(max_num_seqs=64, max_model_len=1024),
        CacheConfig(num_blocks=4_000),
        RequestOverhead(fixed_s=3e-3),
    )


def _lengths(i: int):
    return random_prompt(96 + 32 * (i % 5), 0, i, 4096), 16 + 8 * (i % 3)


def test_one_seed_is_the_single_simulation_and_pooled_seeds_are_each_seeds_requests_together():
    sim, level = _sim(), LevelLoad("c8", 0.5, 3.0, concurrency=8)
    runs = [sim.run(LoadSpec(0.5, 3.0, concurrency=8, seed=s), _lengths) for s in range(3)]
    alone = [summarize("c8", r) for r in runs]
    assert predict_level(sim, level, _lengths) == alone[0]  # seeds=1: seed 0, as before pooling
    assert len({a.ttft_p50_s for a in alone}) > 1  # the draws move the level: there is something to pool
    pooled = predict_level(sim, level, _lengths, seeds=3)
    assert pooled == summarize("c8", runs)
    assert pooled.n_requests == round(sum(a.n_requests for a in alone) / 3)  # a window's, as a run's
    spans = [r.window[1] - r.window[0] for r in runs]
    assert pooled.output_tok_s == pytest.approx(sum(a.output_tok_s * s for a, s in zip(alone, spans)) / sum(spans))
    # A pooled median lies between the seeds' own medians.
    for k in ("ttft_p50_s", "tpot_p50_s"):
        assert min(getattr(a, k) for a in alone) <= getattr(pooled, k) <= max(getattr(a, k) for a in alone)


def test_an_open_loop_level_gets_its_arrival_times_afresh_for_each_seed():
    sim, level = _sim(), LevelLoad("r40", 0.5, 3.0, request_rate=40.0)

    def arrivals():
        rng = random.Random("arrivals")
        return itertools.accumulate(rng.expovariate(40.0) for _ in itertools.count())

    one = predict_level(sim, level, _lengths, arrivals)
    pooled = predict_level(sim, level, _lengths, arrivals, seeds=3)
    # The same arrival times each seed (a shared, spent iterator would leave seeds 2 and 3 none).
    assert pooled.n_requests == one.n_requests
    with pytest.raises(DiagnosisError, match="arrival times"):
        predict_level(sim, level, _lengths)
    with pytest.raises(DiagnosisError, match="seeds"):
        predict_level(sim, level, _lengths, arrivals, seeds=0)
