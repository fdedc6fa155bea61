"""Step-time jitter: measured from a concurrency-1 level's gaps, drawn by the simulator."""

import dataclasses
import random

import numpy as np
import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.predict import LevelLoad, predict_level
from analyzers.plan.profile import LinearCost, MachineProfile
from analyzers.plan.simulate import Simulator, random_prompt
from analyzers.plan.step_jitter import GRID, StepJitter, jitter_of_level
from analyzers.plan.step_model import StepModel
from refengine.config import CacheConfig, SchedulerConfig
from rundir import RunDir
from rundir.records import RequestRecord


def _pauses(n: int, seed: int = 0) -> list[float]:
    """Steps of 2 ms, one in ten paused by 3-8 ms (a collector, the event loop)."""
    rng = random.Random(seed)
    return [0.002 + (rng.uniform(0.003, 0.008) if rng.random() < 0.1 else rng.uniform(-2e-4, 2e-4)) for _ in range(n)]


def _requests(n: int, per: int = 30, seed: int = 0) -> list[list[float]]:
    """n requests of `per` gaps; every fourth one on a host 1.5x slower while it lived."""
    rng = random.Random(seed)
    return [[g * (1.5 if i % 4 == 3 else 1.0) for g in _pauses(per, rng.randrange(10**6))] for i in range(n)]


def test_gaps_give_the_pace_of_each_request_and_the_excess_about_it():
    reqs = _requests(80)
    j = StepJitter.from_requests(reqs, "c1")
    assert j is not None and j.n_gaps == 2400 and j.n_requests == 80 and len(j.excess_s) == GRID
    means = np.array([np.mean(r) for r in reqs])
    # Paces about the level's mean pace (1.125 x the quick requests'): the wander adds no mean of its own.
    assert np.mean(means / means.mean()) == pytest.approx(1.0)
    # (each quick request's mean varies with its pauses: about 1 / 1.125 and 1.5 / 1.125)
    assert 0.85 < j.pace[50] < 0.95 and 1.2 < j.pace[90] < 1.45
    assert j.pace_period_s == pytest.approx(np.median([sum(r) for r in reqs]))
    excess = np.concatenate([np.array(r) - m for r, m in zip(reqs, means)])
    assert abs(excess.mean()) < 1e-12 and j.excess_s[99] == pytest.approx(np.percentile(excess, 99))
    assert 0.003 < j.excess_s[99] < 0.0125 and j.excess_s[50] < 0
    # Inverse CDF: u at a percentile gives it; between two, the line between them.
    assert j.draw_excess(0.99) == pytest.approx(j.excess_s[99])
    assert j.draw_excess(0.995) == pytest.approx((j.excess_s[99] + j.excess_s[100]) / 2)
    assert j.draw_pace(0.0) == j.pace[0]


def test_too_few_gaps_measure_no_jitter_and_bad_percentiles_are_refused():
    assert StepJitter.from_requests(_requests(4, per=100), "c1") is None  # too few requests
    assert StepJitter.from_requests(_requests(6, per=20), "c1") is None  # too few gaps
    assert StepJitter.from_requests([[float("nan")] * 50] * 10, "c1") is None
    flat = tuple([0.0] * GRID)
    with pytest.raises(DiagnosisError):
        StepJitter(tuple(range(GRID, 0, -1)), tuple([1.0] * GRID), 1.0, "c1", 500, 10)  # decreasing
    with pytest.raises(DiagnosisError):
        StepJitter(flat, flat, 1.0, "c1", 500, 10)  # a pace of 0
    with pytest.raises(DiagnosisError):
        StepJitter.from_dict({"excess_s": list(flat)})


def test_a_profile_keeps_its_jitter_through_a_file(tmp_path):
    j = StepJitter.from_requests(_requests(20), "c1-in128-out64")
    profile = dataclasses.replace(published_profile("h100"), step_jitter=j)
    profile.save(tmp_path / "p.json")
    assert MachineProfile.load(tmp_path / "p.json").step_jitter == j
    assert published_profile("h100").step_jitter is None


def _c4(profile: MachineProfile):
    sim = Simulator(
        StepModel(resolve_model("tiny-test"), profile),
        SchedulerConfig(max_num_seqs=64, max_model_len=1024),
        CacheConfig(num_blocks=4_000),
        profile.request_overhead,
    )
    return predict_level(sim, LevelLoad("c4", 1.0, 4.0, concurrency=4), lambda i: (random_prompt(128, 0, i, 4096), 32))


def test_a_steady_simulation_keeps_users_in_lockstep_and_jitter_spreads_them():
    steady = dataclasses.replace(published_profile("h100"), step_overhead=LinearCost(2e-3, 0.0))
    still = _c4(steady)
    # Four users that start together and ask the same lengths stay together: every TTFT is one figure.
    assert still.ttft_p99_s == pytest.approx(still.ttft_p50_s)
    jittery = _c4(dataclasses.replace(steady, step_jitter=StepJitter.from_requests(_requests(80), "c1")))
    assert jittery.ttft_p99_s > 1.3 * jittery.ttft_p50_s
    assert jittery.tpot_p95_s > still.tpot_p95_s
    # The same seed draws the same steps: a prediction is reproducible.
    again = _c4(dataclasses.replace(steady, step_jitter=StepJitter.from_requests(_requests(80), "c1")))
    assert again.ttft_p99_s == jittery.ttft_p99_s


def test_a_runs_concurrency_1_level_gives_its_window_gaps(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    gaps = _pauses(600, seed=1)
    records = []
    for i in range(20):
        t, mine = 1000.0 + i, gaps[i * 30 : (i + 1) * 30]
        ok = i != 3
        records.append(
            RequestRecord(
                level_id="c1-in128-out31",
                concurrency=1,
                request_rate=None,
                target_input_len=128,
                target_output_len=31,
                t_scheduled=t,
                t_sent=t,
                t_first_token=t + 0.01,
                t_done=t + 0.01 + sum(mine),
                status="ok" if ok else "error",
                error_kind=None if ok else "http_status",
                in_window=i >= 2,  # two warm-up requests
                completion_tokens=31 if ok else None,
                itl_s=mine,
            ).derive()
        )
    run.append_records(records)
    j = jitter_of_level(run, "c1-in128-out31")
    kept = [g for i in range(20) if i >= 2 and i != 3 for g in gaps[i * 30 : (i + 1) * 30]]
    assert j is not None and j.n_gaps == len(kept) == 510 and j.n_requests == 17
    assert j.pace_period_s == pytest.approx(
        np.median([sum(gaps[i * 30 : (i + 1) * 30]) for i in range(20) if i >= 2 and i != 3])
    )
    assert jitter_of_level(run, "c4-in128-out31") is None
