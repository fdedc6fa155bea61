"""Where the tail happened: the time windows of a run's latency spikes, and the calm around them.

`llmdiag p99` ties every finding to these windows: a cause is credible when its evidence (a
retransmit burst, a long prefill, a preemption) lines up with the spikes and not with the calm.

A spike is a measured, successful request whose latency is in its level's tail: above the level's
P90 *and* at least TAIL_RATIO times its median (so a level whose P99 is close to its P50 has no
spikes to explain). Its window is the interval that latency covers: [sent, first token] for TTFT,
[first token, done] for TPOT, [sent, done] for E2E. Overlapping or nearly touching windows merge.
Calm is the rest of the run's measured span.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rundir.table import RequestTable

TAIL_RATIO = 1.5  # a spike is at least this many times its level's median
TAIL_QUANTILE = 90.0  # ... and above this percentile of its level (at most 10% are spikes)
MERGE_GAP_S = 0.25  # windows closer than this are one episode
METRIC_SPANS = {
    "ttft": ("t_sent", "t_first_token", "ttft_s"),
    "tpot": ("t_first_token", "t_done", "tpot_s"),
    "e2e": ("t_sent", "t_done", "e2e_s"),
}


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    def __post_init__(self) -> None:
        if not self.end >= self.start:
            raise ValueError(f"a window must not end before it starts: {self.start} .. {self.end}")

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class LevelTail:
    level_id: str
    n: int  # successful measured requests
    p50: float
    p99: float
    threshold: float  # latency above which a request counts as a spike
    n_spikes: int


@dataclass
class TailWindows:
    metric: str
    span: Window  # first send .. last completion of the measured requests
    spikes: list[Window]
    calm: list[Window]
    levels: list[LevelTail]
    spike_rows: np.ndarray  # table rows of the spike requests
    calm_rows: np.ndarray  # measured ok rows that are not spikes
    per_request: dict[int, Window] = field(default_factory=dict)  # spike row -> its own window

    @property
    def spike_s(self) -> float:
        return sum(w.seconds for w in self.spikes)

    @property
    def calm_s(self) -> float:
        return sum(w.seconds for w in self.calm)

    def windows_hit(self, starts: np.ndarray, ends: np.ndarray) -> list[Window]:
        """The spike windows that at least one of the intervals [starts, ends] overlaps."""
        return [w for w in self.spikes if np.any((starts <= w.end) & (ends >= w.start))]


def overlaps(starts: np.ndarray, ends: np.ndarray, windows: list[Window]) -> np.ndarray:
    """For each interval [starts[i], ends[i]], whether it overlaps any of `windows`."""
    starts, ends = np.atleast_1d(starts), np.atleast_1d(ends)
    hit = np.zeros(starts.shape, dtype=bool)
    for w in windows:
        hit |= (starts <= w.end) & (ends >= w.start)
    return hit


def merge(windows: list[Window], gap_s: float = MERGE_GAP_S) -> list[Window]:
    out: list[Window] = []
    for w in sorted(windows, key=lambda w: w.start):
        if out and w.start <= out[-1].end + gap_s:
            out[-1] = Window(out[-1].start, max(out[-1].end, w.end))
        else:
            out.append(w)
    return out


def complement(span: Window, windows: list[Window]) -> list[Window]:
    out, t = [], span.start
    for w in windows:
        if w.start > t:
            out.append(Window(t, min(w.start, span.end)))
        t = max(t, w.end)
    if t < span.end:
        out.append(Window(t, span.end))
    return [w for w in out if w.seconds > 0]


def spike_mask(
    values: np.ndarray, rows_by_level: dict[str, np.ndarray], eligible: np.ndarray
) -> tuple[np.ndarray, list[LevelTail]]:
    """Which eligible rows are spikes of their level (module docstring), and each level's tail."""
    spike = np.zeros(values.shape, dtype=bool)
    levels: list[LevelTail] = []
    for level_id, rows in rows_by_level.items():
        rows = rows[eligible[rows]]
        if rows.size == 0:
            continue
        v = values[rows]
        p50, p99 = float(np.percentile(v, 50)), float(np.percentile(v, 99))
        threshold = max(float(np.percentile(v, TAIL_QUANTILE)), TAIL_RATIO * p50)
        hit = rows[v > threshold]
        spike[hit] = True
        levels.append(LevelTail(level_id, int(rows.size), p50, p99, threshold, int(hit.size)))
    return spike, levels


def find_tail_windows(table: RequestTable, metric: str = "ttft") -> TailWindows:
    """Spike and calm windows of `metric` (ttft, tpot or e2e) over the run's measured requests."""
    if metric not in METRIC_SPANS:
        raise ValueError(f"metric must be one of {', '.join(METRIC_SPANS)}, got {metric!r}")
    start_col, end_col, value_col = METRIC_SPANS[metric]
    df = table.df
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & df[value_col].notna().to_numpy()
    values = df[value_col].to_numpy(float)
    spike, levels = spike_mask(values, table.level_rows(), measured)
    starts, ends = df[start_col].to_numpy(float), df[end_col].to_numpy(float)
    spike_rows = np.flatnonzero(spike)
    per_request = {int(i): Window(starts[i], ends[i]) for i in spike_rows}
    if measured.any():
        span = Window(
            float(np.nanmin(df["t_sent"].to_numpy(float)[measured])),
            float(np.nanmax(df["t_done"].to_numpy(float)[measured])),
        )
    else:
        span = Window(0.0, 0.0)
    spikes = merge(list(per_request.values()))
    return TailWindows(
        metric=metric,
        span=span,
        spikes=spikes,
        calm=complement(span, spikes),
        levels=levels,
        spike_rows=spike_rows,
        calm_rows=np.flatnonzero(measured & ~spike),
        per_request=per_request,
    )
