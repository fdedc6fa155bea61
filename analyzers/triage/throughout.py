"""Conditions that held for a whole level: what neither a spike window nor a tail-against-body
contrast can see.

A neighbour that burns CPU for the whole level, or a lossy link under all of it, leaves no calm to
compare with: every request lived through it, so the tail and the body were exposed alike
(analyzers/triage/exposure.py finds nothing to tell apart), and the spike windows are the level's
ordinary noise. Such a condition is judged on its own terms instead: it must be abnormal in itself
(another process holding cores the target wanted; retransmits on the target's own connections,
which a healthy path does not have) and present in at least THROUGHOUT_SHARE of the probe
intervals inside the level's measured window. The finding then explains the level's tail by
overlap, like a standing tail, and says plainly that the run holds no stretch without it to
measure the difference against (docs/diagnosis.md, "Conditions that held throughout").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.triage.evidence import SampleSplit
from analyzers.triage.tail_windows import METRIC_SPANS, Window
from rundir.table import RequestTable

THROUGHOUT_SHARE = 0.8  # the condition held in at least this share of a level's probe intervals
MIN_INTERVALS = 3  # fewer probe intervals inside a level prove nothing


@dataclass(frozen=True)
class HeldLevel:
    level_id: str
    window: Window  # the level's measured window: first send .. last completion
    share: float  # of its probe intervals, the share where the condition held
    rows: np.ndarray  # the kept probe rows (of the SampleSplit) inside the window

    def words(self) -> str:
        return f"{self.level_id} ({self.share:.0%} of its {self.window.seconds:.0f} s)"


def level_windows(table: RequestTable, metric: str) -> dict[str, Window]:
    """Each level's measured window: the first send to the last completion of its measured requests."""
    df = table.df
    measured = df["in_window"].to_numpy(bool) & (df["status"] != "cancelled").to_numpy()
    t_sent, t_done = df["t_sent"].to_numpy(float), df["t_done"].to_numpy(float)
    end_col = METRIC_SPANS[metric][1]
    ends = np.where(np.isfinite(t_done), t_done, df[end_col].to_numpy(float))
    out: dict[str, Window] = {}
    for level_id, rows in table.level_rows().items():
        rows = rows[measured[rows]]
        s, e = t_sent[rows], ends[rows]
        s, e = s[np.isfinite(s)], e[np.isfinite(e)]
        if s.size and e.size and e.max() > s.min():
            out[level_id] = Window(float(s.min()), float(e.max()))
    return out


def held_throughout(split: SampleSplit, mask: np.ndarray, windows: dict[str, Window]) -> list[HeldLevel]:
    """The levels in whose measured window `mask` (over the split's kept rows) held in at least
    THROUGHOUT_SHARE of the probe intervals that lie inside it."""
    out = []
    for level_id, w in windows.items():
        inside = np.flatnonzero((split.start >= w.start - 1e-9) & (split.end <= w.end + 1e-9))
        if inside.size < MIN_INTERVALS:
            # short levels: the intervals that overlap the window at all
            inside = np.flatnonzero((split.end > w.start) & (split.start < w.end))
        if inside.size < MIN_INTERVALS:
            continue
        share = float(mask[inside].mean())
        if share >= THROUGHOUT_SHARE:
            out.append(HeldLevel(level_id, w, share, inside))
    return out


NO_CONTRAST = (
    "every request of the level lived through it, so the run holds no stretch without it to measure "
    "the difference against"
)
