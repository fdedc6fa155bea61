"""The answer from pooled levels: in / out / unclear by the requests over each bound (an exact
binomial test), the capacity, its interval, and what bounded it."""

from __future__ import annotations

import numpy as np

from analyzers.capacity.answer import CapacityAnswer, capacity_answer, judge_loads
from analyzers.stats.slo import Slos
from analyzers.stats.summarize import summarize_level
from reports.capacity_words import capacity_headline
from rundir import RequestRecord
from rundir.table import RequestTable

SLOS = Slos(ttft_p99_s=1.0, tpot_p95_s=0.1)


def _records(level: str, c: int, ttft: np.ndarray) -> list[RequestRecord]:
    out = []
    for k, y in enumerate(ttft):
        t = 1000.0 + k * 0.05
        out.append(
            RequestRecord(
                level_id=level,
                concurrency=c,
                request_rate=None,
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
            ).derive()
        )
    return out


def _answer(levels: dict[float, dict[str, np.ndarray]], notes: dict[str, list[str]] | None = None):
    records, loads, stats = [], {}, {}
    for load, by_id in levels.items():
        for lid, ttft in by_id.items():
            recs = _records(lid, int(load), ttft)
            records += recs
            loads.setdefault(load, []).append(lid)
            stats[lid] = summarize_level(recs, lid, 10.0, SLOS)
            stats[lid].notes += (notes or {}).get(lid, [])
    verdicts = judge_loads(RequestTable.from_records(records), loads, stats, SLOS)
    return capacity_answer("concurrency", verdicts, limit_reached=False)


def test_clear_boundary():
    rng = np.random.default_rng(0)
    a = _answer({c: {f"c{c}": rng.uniform(0.1, 0.3, 400) + (2.0 if c > 4 else 0)} for c in (1, 2, 4, 5, 8)})
    assert (a.capacity, a.low, a.high, a.lowest_out, a.bounded_by) == (4, 4, 4, 5, "slo")
    assert "max concurrency within SLO: 4" in capacity_headline(a)


def test_unclear_load_widens_the_interval():
    rng = np.random.default_rng(1)
    close = np.r_[rng.uniform(0.1, 0.3, 395), [0.99, 1.0, 1.01, 1.02, 1.03]]  # P99 right at the bound
    a = _answer(
        {2: {"c2": rng.uniform(0.1, 0.3, 400)}, 3: {"c3": close, "c3-r2": close}, 4: {"c4": rng.uniform(2, 3, 400)}}
    )
    verdict = {v.load: v.verdict for v in a.loads}
    assert verdict == {2: "in", 3: "unclear", 4: "out"}
    assert a.low == 2 and a.high == 3


def test_bounded_by_the_client():
    rng = np.random.default_rng(2)
    ok = rng.uniform(0.1, 0.3, 400)
    a = _answer(
        {1: {"c1": ok}, 2: {"c2": ok}, 4: {"c4": ok}},
        notes={"c4": ["INVALID: the client fell behind (send lag); add --workers"]},
    )
    assert a.capacity == 2 and a.bounded_by == "client" and "bounded by client" in capacity_headline(a)


def test_the_recorded_answer_round_trips_and_leads_the_report():
    """run.json keeps the answer (rundir.capacity); the report reads it back and leads with the same headline."""
    from analyzers.capacity.answer import answer_in
    from reports.answer import _capacity_item
    from reports.capacity_table import capacity_rows
    from rundir import SweepInfo

    def sweep(capacity: dict) -> SweepInfo:
        return SweepInfo.from_dict({"capacity": capacity})

    rng = np.random.default_rng(0)
    a = _answer({c: {f"c{c}": rng.uniform(0.1, 0.3, 400) + (2.0 if c > 4 else 0)} for c in (1, 2, 4, 5, 8)})
    back = answer_in(sweep({"search": {}, "answer": a.to_dict()}))
    assert back == a and capacity_headline(back) == capacity_headline(a)
    item = _capacity_item(back)
    assert item.text.startswith("max concurrency within SLO: 4") and item.tone == "good"
    assert item.evidence[:2] == ["in: 1, 2, 4", "out: 5, 8"]
    rows = capacity_rows(back)
    assert [r[0] for r in rows] == ["1", "2", "4", "5", "8"] and [r[2] for r in rows] == [
        "in",
        "in",
        "in",
        "out",
        "out",
    ]
    _reads_at_every_width(back)
    assert answer_in(SweepInfo()) is None and answer_in(sweep({"search": {}})) is None  # a search still running
    other = sweep({"answer": {"axis": "rate", "unknown_field": 1}})
    assert answer_in(other) is None  # another version's
    assert other.to_dict()["capacity"]["answer"] == {"axis": "rate", "unknown_field": 1}  # kept, written back


def test_the_answer_of_a_trace_search_is_also_a_speed():
    answer = CapacityAnswer("rate", 7.34, 7.34, 7.34, 8.0, "slo", 7.3, 117.0, [], trace_rate=4.0)
    assert "7.34 req/s, the trace at 1.83x its own speed (clear at 95%)" in capacity_headline(answer)
    assert capacity_headline(CapacityAnswer.from_dict(answer.to_dict())) == capacity_headline(answer)


def test_too_few_requests_establish_no_load_and_the_answer_says_so():
    """44 requests all well within the bound cannot establish a P99 within it (a bootstrap
    interval of their P99 would claim so); the answer is a point estimate and says why."""
    rng = np.random.default_rng(3)
    a = _answer(
        {
            1: {"c1": rng.uniform(0.1, 0.3, 22), "c1-r2": rng.uniform(0.1, 0.3, 22)},
            2: {"c2": rng.uniform(0.1, 0.3, 44)},
            3: {"c3": rng.uniform(2, 3, 44)},
        }
    )
    assert {v.load: v.verdict for v in a.loads} == {1: "unclear", 2: "unclear", 3: "out"}
    assert all(v.too_few for v in a.loads if v.load < 3)
    assert a.capacity == 2 and a.low is None and a.high == 2
    assert a.loads[0].over_bound == {"TTFT P99": 0, "TPOT P95": 0} and a.loads[2].over_bound["TTFT P99"] == 44
    assert (
        "max concurrency within SLO: 2 (a point estimate, not established at 95%: a P99 within its bound "
        "needs 299 requests with none over it, the loads had 44"
    ) in capacity_headline(a)
    assert CapacityAnswer.from_dict(a.to_dict()) == a


def _reads_at_every_width(answer) -> None:
    """`llmbench capacity`'s table at 80, 100 and 160 columns: every figure and level id whole, none cut."""
    import io

    from rich.console import Console

    from reports.capacity_table import capacity_grid, capacity_rows
    from reports.grid import print_grid

    grid = capacity_grid(answer)
    figures = {row[i] for row in capacity_rows(answer) for i, col in enumerate(grid.columns) if not col.wraps}
    for width in (80, 100, 160):
        console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
        print_grid(console, capacity_grid(answer))
        text = console.export_text()
        lines = text.splitlines()
        assert "…" not in text and max(len(line.rstrip()) for line in lines) <= width, text
        for cell in figures:  # "412 [400, 430]", "TTFT 0, TPOT 2": each on one line
            assert any(cell in line for line in lines), (cell, text)


def test_a_load_whose_requests_over_the_bound_come_in_one_burst_is_not_out():
    """Closed loop: one stall makes every waiting request late together. 12 of 400 over the TTFT bound
    in one burst are one event among ~33, not 12 independent draws (analyzers.stats.exceedance)."""
    base = np.random.default_rng(4).uniform(0.1, 0.3, 400)
    burst, scattered = base.copy(), base.copy()
    burst[200:212] = 2.0
    scattered[::34] = 2.0
    # two searches (two servers): the clustering of one search says nothing of the other
    a, b = _answer({4: {"c4": burst}}), _answer({5: {"c5": scattered}})
    by_load = {v.load: v for v in a.loads + b.loads}
    assert by_load[4].over_bound["TTFT P99"] == by_load[5].over_bound["TTFT P99"] == 12
    assert by_load[4].design_effect["TTFT P99"] > 8 and by_load[4].verdict == "unclear"
    assert by_load[5].design_effect["TTFT P99"] == 1.0 and by_load[5].verdict == "out"
    from reports.capacity_table import capacity_rows

    rows = {r[0]: r for r in capacity_rows(a) + capacity_rows(b)}
    assert "TTFT 12 (in bursts: each counts 1/" in rows["4"][4] and rows["5"][4].startswith("TTFT 12, ")


def test_a_load_with_nothing_over_is_judged_with_the_clustering_the_search_saw_elsewhere():
    """A server that stalls (12 late together at c8) clusters its late requests at every load: c4's
    400 requests with none over hold about 400 / D independent draws, too few for an `in` (299 needed),
    where judged alone they would be. Independent late requests elsewhere leave c4 `in`."""
    rng = np.random.default_rng(9)
    clean = rng.uniform(0.1, 0.3, 400)
    stalled = rng.uniform(0.1, 0.3, 400)
    stalled[200:212] = 2.0
    alone = {v.load: v for v in _answer({4: {"c4": clean}}).loads}
    assert alone[4].verdict == "in"
    stalling = {v.load: v for v in _answer({4: {"c4": clean}, 8: {"c8": stalled}}).loads}
    assert stalling[4].over_bound["TTFT P99"] == 0 and stalling[4].design_effect["TTFT P99"] > 8
    assert stalling[4].verdict == "unclear" and stalling[4].too_few
    scattered = rng.uniform(0.1, 0.3, 400)
    scattered[::34] = 2.0
    independent = {v.load: v for v in _answer({4: {"c4": clean}, 8: {"c8": scattered}}).loads}
    assert independent[4].verdict == "in" and independent[4].design_effect["TTFT P99"] < 2
