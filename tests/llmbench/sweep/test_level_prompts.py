"""Every level of a run sends prompts of its own: a server's prefix cache keeps an earlier level's
prompts, and a level that resent them measured cache hits (docs/metrics.md, "Every level's prompts
are its own")."""

from __future__ import annotations

from types import SimpleNamespace

from llmbench.capacity.search import CapacityPlan, SearchSpec
from llmbench.sweep.spec import SweepSpec
from loadgen.specs import LevelSpec
from loadgen.workloads import WorkloadOptions, make_workload
from rundir.workload_spec import WorkloadSpec


def _prompts(level: LevelSpec, n: int = 32) -> set[tuple[int, ...]]:
    options = WorkloadOptions.of(
        WorkloadSpec(prompt_format="ids"), input_len=level.input_len, output_len=level.output_len, seed=level.seed
    )
    workload = make_workload(options)
    return {tuple(workload.spec(i).prompt) for i in range(n)}


def test_no_two_levels_of_a_sweep_share_a_prompt():
    levels = SweepSpec(concurrency=[1, 4, 16], input_lens=[64, 128], output_lens=[8]).levels()
    seen: set[tuple[int, ...]] = set()
    for level in levels:
        mine = _prompts(level)
        assert not mine & seen, f"{level.level_id} resends an earlier level's prompts"
        seen |= mine


def test_the_same_run_seed_sends_the_same_prompts_and_another_seed_others():
    a = SweepSpec(concurrency=[1, 4], seed=3).levels()
    b = SweepSpec(concurrency=[4], seed=3).levels()  # a level's prompts do not depend on the levels before it
    c = SweepSpec(concurrency=[4], seed=4).levels()
    assert _prompts(a[1]) == _prompts(b[0]) and not _prompts(b[0]) & _prompts(c[0])


def test_each_load_and_repeat_of_a_capacity_search_is_a_fresh_sample():
    plan = CapacityPlan(SearchSpec("concurrency", repeats=2), LevelSpec("x", concurrency=1, input_len=16, output_len=8))
    stats: dict = {}
    issued = []
    while (level := plan.next_level(stats)) is not None and len(issued) < 30:
        issued.append(level)
        stats[level.level_id] = SimpleNamespace(slo_met=level.concurrency <= 6)
    assert len({lv.level_id for lv in issued}) == len(issued) >= 4
    seen: set[tuple[int, ...]] = set()
    for level in issued:
        mine = _prompts(level, 8)
        assert not mine & seen, f"{level.level_id} resends an earlier probe's prompts"
        seen |= mine
