"""A fleet's capacity answer in replicas: per replica it is the fleet's / N at the balance measured, and the
replicas a target rate needs follow from it, with what extrapolating from the measured size assumes."""

from __future__ import annotations

import math

import numpy as np

from analyzers.capacity.answer import capacity_answer, judge_loads
from analyzers.capacity.replicas import busiest_share, per_replica, replicas_for, with_fleet
from analyzers.stats.slo import Slos
from analyzers.stats.summarize import summarize_level
from reports.capacity_words import capacity_headline
from reports.replicas_words import per_replica_words, replicas_for_words
from rundir import RequestRecord
from rundir.table import RequestTable

SLOS = Slos(ttft_p99_s=1.0, tpot_p95_s=0.1)
REPLICAS = 4


def _level(level: str, rate: float, ttft: np.ndarray, shares: list[float]) -> list[RequestRecord]:
    """A rate level's requests, served by replicas "0".."3" in the given proportions."""
    names = np.repeat([str(k) for k in range(len(shares))], np.round(np.array(shares) * len(ttft)).astype(int))
    out = []
    for k, y in enumerate(ttft):
        t = 1000.0 + k / rate
        out.append(
            RequestRecord(
                level_id=level,
                concurrency=None,
                request_rate=rate,
                target_input_len=8,
                target_output_len=5,
                t_scheduled=t,
                t_sent=t,
                t_first_token=t + y,
                t_done=t + y + 0.2,
                status="ok",
                in_window=True,
                completion_tokens=5,
                prompt_tokens=8,
                replica=str(names[k % len(names)]),
            ).derive()
        )
    return out


def _fleet_answer(replicas: int = REPLICAS):
    """A rate search of a fleet: within the SLO up to 40 req/s, out from 48; the busiest replica took 30%."""
    rng = np.random.default_rng(0)
    shares = [0.3, 0.25, 0.25, 0.2]
    records, loads, stats = [], {}, {}
    for rate in (10.0, 20.0, 40.0, 48.0):
        lid = f"r{rate:g}"
        recs = _level(lid, rate, rng.uniform(0.1, 0.3, 400) + (2.0 if rate > 40 else 0), shares)
        records += recs
        loads[rate] = [lid]
        stats[lid] = summarize_level(recs, lid, 10.0, SLOS)
    table = RequestTable.from_records(records)
    answer = capacity_answer("rate", judge_loads(table, loads, stats, SLOS), limit_reached=False)
    return with_fleet(answer, table, replicas), table


def test_the_capacity_per_replica_is_the_fleets_over_n_at_the_balance_measured():
    answer, table = _fleet_answer()
    assert answer.capacity == 40 and answer.replicas == REPLICAS
    assert busiest_share(table, ["r40"]) == answer.busiest_share == 0.3
    each = per_replica(answer)
    assert each.capacity == 10.0 and each.rate_req_s == 10.0
    words = per_replica_words(each)
    assert words is not None and "per replica: 10 req/s" in words and "the fleet's / 4" in words
    assert "assumes the balance measured" in words and "busiest replica served 30%" in words
    assert "per replica: 10 req/s" in capacity_headline(answer)  # the answer leads with it too
    # One replica: the answer is already per replica, and nothing more is said.
    one, _ = _fleet_answer(replicas=1)
    assert per_replica_words(per_replica(one)) is None and "per replica" not in capacity_headline(one)
    assert one.busiest_share is None


def test_replicas_needed_for_the_seeds_peak_from_the_measured_per_replica_capacity():
    answer, _ = _fleet_answer()
    each = per_replica(answer)
    need = replicas_for(350.0, each)
    assert need.replicas == math.ceil(350 / 10.0) == 35 and need.extrapolated
    assert need.fewest is not None and need.most is not None and need.fewest <= 35 <= need.most
    words = replicas_for_words(need)
    assert words.startswith("350 req/s needs 35 replicas at 10 req/s each")
    assert "extrapolated from the 4 measured" in words and "same balance" in words
    # At the size measured nothing is extrapolated; more load never needs fewer replicas.
    assert not replicas_for(40.0, each).extrapolated and "the fleet size measured" in replicas_for_words(
        replicas_for(40.0, each)
    )
    counts = [replicas_for(r, each).replicas for r in (5.0, 40.0, 41.0, 350.0, 351.0)]
    assert counts == [1, 4, 5, 35, 36]


def test_an_answer_of_one_replica_says_the_router_is_assumed_free():
    one, _ = _fleet_answer(replicas=1)
    words = replicas_for_words(replicas_for(350.0, per_replica(one)))
    assert words.startswith("350 req/s needs 9 replicas at 40 req/s each") and "llmdiag plan --peak-rate" in words
