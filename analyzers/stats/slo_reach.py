"""The SLO each level would meet: the tightest bounds of the run's SLO form (TTFT P99, TPOT P95, and
E2E P99 when the SLO has one) that the level's own percentiles satisfy.

This is what the answer leads with when the user gave no SLO (reports/answer.py): the default is a
GPU server's, and "even the lowest load missed it" says nothing of a CPU engine; the bounds each
level reaches say what it can promise. They are the same percentiles the verdict judges
(analyzers.stats.slo): the TTFT P99 with the requests that failed before their first token counted
as never answered (unbounded when the P99 falls among them), the TPOT P95 of the successful ones.
They are point estimates: a P99 from fewer than MIN_SAMPLES_FOR_P99 requests is flagged, and
establishing one within a bound takes more still (analyzers.stats.exceedance.min_n_for_in).
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.stats.latency import LevelStats


@dataclass(frozen=True)
class SloReach:
    level_id: str
    n: int  # requests the TTFT P99 rests on (successful, in the window)
    p99_reliable: bool  # n >= MIN_SAMPLES_FOR_P99
    ttft_p99_s: float | None  # None with ttft_unbounded: no TTFT bound is met
    ttft_unbounded: bool
    tpot_p95_s: float | None  # None: no request had two tokens
    e2e_p99_s: float | None = None  # only when the SLO bounds E2E


def slo_reach(lv: LevelStats, with_e2e: bool = False) -> SloReach | None:
    """The bounds `lv` meets; None for a level that measured nothing or has no verdict (cut short,
    its client behind: its percentiles are no measurement of the server)."""
    if lv.n_in_window == 0 or lv.n_ok == 0 or lv.slo_met is None:
        return None
    ttft = lv.ttft_p99_with_failures_s if lv.ttft_p99_with_failures_s is not None else lv.ttft.p.get("p99")
    return SloReach(
        lv.level_id,
        lv.ttft.n,
        lv.ttft.p99_reliable,
        None if lv.ttft_p99_unbounded else ttft,
        lv.ttft_p99_unbounded,
        lv.tpot.p.get("p95"),
        lv.e2e.p.get("p99") if with_e2e else None,
    )
