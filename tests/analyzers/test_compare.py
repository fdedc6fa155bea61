"""A/B comparison: identical runs are within noise; doubled latencies are worse, with intervals that
exclude zero; runs with different levels compare on the ones they share."""

import numpy as np
import pytest
from synth_run import make_run, rec

from analyzers.compare import LATENCY_METRICS, compare_runs
from analyzers.summary import analyze_run


def _records(scale: float = 1.0, levels=(("c1", 1), ("c4", 4)), seed: int = 7):
    rng = np.random.default_rng(seed)
    out = []
    for level, c in levels:
        for i in range(300):
            ttft = 0.05 + rng.exponential(0.2)
            tpot = 0.01 + rng.exponential(0.01)
            out.append(rec(i * 0.03, ttft * scale, (ttft + 10 * tpot) * scale, 11, level=level, concurrency=c))
    return out


def _analyzed(path, records):
    windows = {lv: (0, 9) for lv in {r.level_id for r in records}}
    return analyze_run(make_run(path, records, windows))


def test_identical_runs_are_within_noise(tmp_path):
    a = _analyzed(tmp_path / "a", _records())
    b = _analyzed(tmp_path / "b", _records())
    c = compare_runs(a, b)
    assert [lc.level_id for lc in c.levels] == ["c1", "c4"] and not c.only_a and not c.only_b
    verdicts = {d.verdict for lc in c.levels for d in lc.deltas}
    assert verdicts <= {"within noise", "n/a"} and "within noise" in verdicts
    for lc in c.levels:
        for d in lc.deltas:
            if d.verdict != "n/a":
                assert d.delta == pytest.approx(0, abs=1e-6) and d.ci[0] <= 0 <= d.ci[1]


def test_doubled_latencies_are_worse_with_intervals_excluding_zero(tmp_path):
    a = _analyzed(tmp_path / "a", _records())
    b = _analyzed(tmp_path / "b", _records(scale=2.0))
    c = compare_runs(a, b)
    latency = {name for name, _, _ in LATENCY_METRICS}
    for lc in c.levels:
        by = {d.metric: d for d in lc.deltas}
        for name in latency:
            d = by[name]
            assert d.verdict == "worse", (lc.level_id, d)
            assert d.ci[0] > 0 and d.rel == pytest.approx(1.0, rel=1e-3)
        assert by["output tok/s"].verdict == "within noise"  # same tokens over the same window
    # The reverse direction is "better".
    back = compare_runs(b, a)
    assert all(d.verdict == "better" for lc in back.levels for d in lc.deltas if d.metric in latency)


def test_different_specs_compare_on_shared_levels(tmp_path):
    a = _analyzed(tmp_path / "a", _records(levels=(("c1", 1), ("c4", 4))))
    b = _analyzed(tmp_path / "b", _records(levels=(("c4", 4), ("c8", 8))))
    c = compare_runs(a, b)
    assert [lc.level_id for lc in c.levels] == ["c4"] and c.only_a == ["c1"] and c.only_b == ["c8"]
