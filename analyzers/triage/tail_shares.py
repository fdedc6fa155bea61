"""Each finding's share of the run's tail, and the rules by which one finding yields its share to
another: findings rank by the share of the tail requests they explain (analyzers/triage/contracts.py,
split_causes), so a symptom must not outrank its cause. `llmdiag p99` (analyzers/triage/p99.py) runs
these after the checks: baseline_lived_through_it, set_tail_shares, then the yields (these and the
fleet's, analyzers/triage/fleet/).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.triage.client_lag import LAG_ID
from analyzers.triage.contracts import CONTEXT_SHARE, OWN_SHARE, Finding
from analyzers.triage.failures import is_consequence_of_load
from analyzers.triage.levels import LevelLoad
from analyzers.triage.server import QUEUE_ID
from analyzers.triage.standing.check import tail_rows
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows, Window, merge, overlaps
from rundir.table import RequestTable

SATURATION_ID = "p99.sched.saturation"


def unmeasured_is_a_cause(findings: list[Finding]) -> None:
    """Streams the client read in one burst (analyzers/bursts.py) were not measured: every latency of
    their level is the client's clock, so the finding is a cause however little of the tail it
    overlaps (a level of bursts can have no tail at all: its TTFT is uniformly the client's wait)."""
    for f in findings:
        if f.check_id == LAG_ID and "burst_streams" in f.evidence:
            f.tail_share = max(f.tail_share or 0.0, CONTEXT_SHARE)


def last_resort_yields(findings: list[Finding]) -> None:
    """Saturation is the standing verdict of last resort (none of the named causes holds): where a
    condition separates the tail from the body request by request, that condition is the cause and
    the level being busy is its consequence, so saturation explains none of the tail (context).
    Queueing is a symptom too: where a separating cause of the fleet, scheduling or the host (a slow
    replica, a busier one, a long prefill ahead, preemptions, a neighbour) covers the queue's windows,
    the queue is that cause's.
    A neighbour that held the host's cores through a whole level took capacity from the engine:
    the queue that formed behind its slower steps in that level is its consequence too (queueing or
    saturation found in other levels stands; an admission limit or a full KV cache has findings of
    its own, which do not yield)."""
    separating = [
        f
        for f in findings
        if f.kind == "differential" and (f.tail_share or 0.0) >= CONTEXT_SHARE and not is_consequence_of_load(f)
    ]
    held = [
        w
        for f in findings
        if f.kind == "throughout" and f.category == "host" and (f.tail_share or 0.0) >= CONTEXT_SHARE
        for w in f.explains
    ]
    # The requests a long prefill held up, or a neighbour or preemptions slowed, waited: that queue
    # is the cause's, where it lies in the cause's own requests' windows.
    queue_causes = [w for f in separating if f.category in ("fleet", "scheduling", "host") for w in f.explains]
    for f in findings:
        if (
            f.check_id == SATURATION_ID
            and separating
            or f.check_id in (SATURATION_ID, QUEUE_ID)
            and held
            and _inside(f.explains, held)
            or f.check_id == QUEUE_ID
            and queue_causes
            and _inside(f.explains, queue_causes, QUEUE_INSIDE)
        ):
            f.tail_share = 0.0


def baseline_lived_through_it(findings: list[Finding], levels: list[LevelLoad]) -> None:
    """A condition that held throughout a level (a neighbour, a lossy path) cannot explain why that
    level stands above its baseline when the baseline lived through it too and had no standing tail:
    the excess is measured against a level that had the condition, so it is the load's. Such a
    level's window leaves the finding's; a finding left with none explains none of the tail."""
    by_id = {lv.level_id: lv for lv in levels}
    for f in findings:
        if f.kind != "throughout":
            continue
        held = set(f.evidence.get("throughout_levels") or ())
        shared = [
            lv
            for lv in levels
            if lv.standing
            and lv.level_id in held
            and lv.baseline_level is not None
            and lv.baseline_level in held
            and lv.baseline_level != lv.level_id
            and not by_id[lv.baseline_level].standing
        ]
        if not shared:
            continue
        f.explains = [w for w in f.explains if not _inside([w], [lv.window for lv in shared], 0.5)]
        f.evidence["baseline_lived_through_it"] = [lv.level_id for lv in shared]


QUEUE_INSIDE = 0.5  # the queue's spike windows lie this much in a separating cause's requests' windows


def _inside(windows: list[Window], held: list[Window], share: float = 0.8) -> bool:
    """Whether `share` of the time `windows` cover lies inside the `held` ones (a level slow beside
    the neighbour, not a level slow on its own)."""
    total = sum(w.seconds for w in windows)
    covered = sum(max(0.0, min(w.end, h.end) - max(w.start, h.start)) for w in windows for h in merge(held, 0.0))
    return total > 0 and covered >= share * total


@dataclass(frozen=True)
class TailExcess:
    """The run's tail requests (the spike requests and the standing levels' tail requests): table
    rows, the window each one's latency covers, and its latency above what it would be without the
    tail, in seconds (a spike over its level's median; a standing level's request over its
    baseline's median, or all of it where the level has no baseline; a request cut off before its
    latency was known weighs the time it waited)."""

    rows: np.ndarray
    level_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    seconds: np.ndarray

    def weights(self) -> np.ndarray:
        """Normalized to sum to 1 (equal weights when none stands above)."""
        total = float(self.seconds.sum())
        if total <= 0:
            return np.full(self.rows.shape, 1.0 / self.rows.size) if self.rows.size else self.seconds
        return self.seconds / total


def tail_excess(table: RequestTable, metric: str, tails: TailWindows, levels: list[LevelLoad]) -> TailExcess:
    tail = np.union1d(tails.spike_rows, tail_rows(levels)).astype(int)
    start_col, end_col, value_col = METRIC_SPANS[metric]
    df = table.df
    starts = df[start_col].to_numpy(float)[tail]
    ends = df[end_col].to_numpy(float)[tail]
    # A request cut off before its first token: its window runs to when it was cut off.
    starts = np.where(np.isfinite(starts), starts, df["t_sent"].to_numpy(float)[tail])
    ends = np.where(np.isfinite(ends), ends, df["t_done"].to_numpy(float)[tail])
    values = df[value_col].to_numpy(float)[tail]
    latency = np.where(np.isfinite(values), values, ends - starts)
    level_ids = df["level_id"].to_numpy()[tail]
    medians = {lv.level_id: lv.p50 for lv in tails.levels}
    base = np.array([medians.get(level, np.nan) for level in level_ids], dtype=float)
    for lv in levels:
        if lv.standing:
            base[np.isin(tail, lv.tail_rows)] = lv.baseline_p50 if lv.baseline_p50 is not None else 0.0
    excess = np.where(np.isfinite(latency) & np.isfinite(base), np.maximum(latency - base, 0.0), 0.0)
    return TailExcess(tail, level_ids, starts, ends, excess)


def set_tail_shares(
    table: RequestTable, metric: str, tails: TailWindows, levels: list[LevelLoad], findings: list[Finding]
) -> TailExcess:
    """Each finding's share of the run's tail: of the tail's latency above the median (TailExcess),
    the part carried by requests whose own latency window overlaps a window the finding explains.
    Weighed, as the differential findings' own share is (exposure.py): a P99 is made by the
    requests far above the median, and a neighbour that stalled 23 requests by 250 ms each must
    not read as 16% of a tail padded with a hundred requests 4 ms over it (counted one request each,
    it did)."""
    tail = tail_excess(table, metric, tails, levels)
    weights = tail.weights()
    for f in findings:
        if f.kind not in OWN_SHARE:  # a differential or added finding measured its own share of the tail
            f.tail_share = (
                float(np.sum(weights * overlaps(tail.starts, tail.ends, f.explains))) if tail.rows.size else 0.0
            )
    return tail
