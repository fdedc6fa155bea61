"""The tail's separate episodes per replica (analyzers/triage/fleet/tail_episodes.py): one stall is one
episode however many requests it held, and a replica is named by its episodes only beyond chance."""

from __future__ import annotations

import numpy as np
import pytest
from fleet_runs import Replica, fleet_run

from analyzers.triage.fleet.tail_episodes import EPISODES_P, beyond_chance, tail_episodes
from analyzers.triage.p99 import diagnose_p99


def test_overlapping_tail_requests_of_a_replica_are_one_episode():
    starts = np.array([0.0, 0.5, 0.9, 5.0, 0.2, 3.0])
    ends = np.array([1.0, 1.2, 2.0, 5.5, 0.4, 3.1])
    tail = np.array([True, True, True, True, True, False])
    replica = np.array([0, 0, 0, 0, 1, 1])
    # Replica 0: [0, 2] holds three requests, then [5, 5.5]; replica 1: one (its other is not the tail).
    assert tail_episodes(starts, ends, tail, replica, 2).tolist() == [2, 1]


def test_a_replica_with_every_episode_is_beyond_chance_and_an_even_split_is_not():
    assert beyond_chance(np.array([0, 17]), 1, 0.5) == pytest.approx(0.5**17)
    assert beyond_chance(np.array([17, 1]), 0, 0.5) < EPISODES_P
    assert beyond_chance(np.array([35, 57]), 1, 0.5) > EPISODES_P  # the unevenest clean fleet family draw
    assert beyond_chance(np.array([0, 0]), 0, 0.5) == 1.0


def test_one_long_pause_of_a_healthy_replica_is_one_episode_not_beyond_chance():
    """Twelve tail requests held by one pause of replica 1 at once, and eight more spread over both
    replicas. Counted one by one, 16 of the 20 on a replica of half the requests is beyond chance
    (p = 0.006); it is one event, and by episodes (5 of 9) it is not."""
    starts = np.r_[np.linspace(10.0, 10.9, 12), np.arange(8) * 3.0 + 20.0]
    ends = np.r_[np.full(12, 11.0), np.arange(8) * 3.0 + 20.5]
    replica = np.r_[np.ones(12, dtype=int), np.arange(8) % 2]
    tail = np.ones(20, dtype=bool)
    episodes = tail_episodes(starts, ends, tail, replica, 2)
    assert episodes.tolist() == [4, 5]
    assert beyond_chance(np.array([4, 16]), 1, 0.5) < 0.01  # by requests
    assert beyond_chance(episodes, 1, 0.5) > EPISODES_P


def test_a_replica_that_something_slows_now_and_then_is_named_by_its_tails_episodes(tmp_path):
    """One request in seven on replica 1 is 4x slower (a neighbour, a throttled GPU: nothing the probes
    read): its median 1.1x the other's, 98% of the tail on it, in episodes far beyond its half share."""
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(), Replica(stall_share=0.15)], n=400, seed=3, concurrency=6))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    ev = diag.findings[0].evidence
    assert ev["replica"] == "1" and ev["slowness_from"] == "its tail" and ev["made_the_tails_episodes"] is True, ev
    assert ev["tail_episodes_p"] <= EPISODES_P and ev["tail_episodes"]["1"] > 5 * ev["tail_episodes"]["0"], ev
    assert "something slows it now and then" in diag.findings[0].title
