"""Standing tails: levels whose whole distribution, not a few windows, is the problem.

A spike (analyzers/triage/tail_windows.py) is a request far above its own level's median; a level that
is slow throughout has no spikes to stand out. A level has a *standing* tail when

- it misses the SLO for the metric (TTFT P99, TPOT P95, E2E P99 as the run's SloSpec bounds), or
- its median sits far above the unloaded baseline: the lowest-load level's median, at least
  STANDING_RATIO times and by at least MIN_EXCESS_S (so microsecond noise at tiny latencies
  does not count).

Its tail requests are those above the SLO bound (when it misses the SLO) or above
STANDING_RATIO x the baseline median; they join the spike requests as the run's tail, which is
what findings are ranked by (the share of it they explain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.triage.tail_windows import METRIC_SPANS, Window
from rundir import RunInfo
from rundir.table import RequestTable

STANDING_RATIO = 3.0
MIN_EXCESS_S = {"ttft": 0.050, "tpot": 0.005, "e2e": 0.100}
# Which statistic of the level the SLO bounds, per metric (docs/metrics.md's defaults).
SLO_STAT = {"ttft": ("ttft_p99_s", 99.0), "tpot": ("tpot_p95_s", 95.0), "e2e": ("e2e_p99_s", 99.0)}


@dataclass
class LevelLoad:
    level_id: str
    load: float | None  # concurrency, or request rate for open-loop levels
    n: int  # successful measured requests
    window: Window  # first send .. last completion of the level's measured requests
    p50: float
    slo_stat: float  # the statistic the SLO bounds (P99, or P95 for TPOT)
    slo_bound: float | None
    baseline_level: str | None
    baseline_p50: float | None
    standing: bool
    why: str  # "misses the SLO ..." / "median N x the baseline ..." / ""
    tail_rows: np.ndarray  # table rows of this level's standing-tail requests (empty if not standing)
    unfinished: bool = False  # no request finished: p50 and slo_stat are lower bounds (time until cut off)

    @property
    def misses_slo(self) -> bool:
        return self.slo_bound is not None and self.slo_stat > self.slo_bound


def _load_of(df, rows: np.ndarray) -> float | None:
    for col in ("concurrency", "request_rate"):
        if col in df:
            v = df[col].to_numpy(float)[rows]
            v = v[np.isfinite(v)]
            if v.size:
                return float(v[0])
    return None


def level_loads(table: RequestTable, info: RunInfo | None, metric: str) -> list[LevelLoad]:
    """Every level's standing verdict for `metric`, the baseline being the lowest-load level."""
    _, _, col = METRIC_SPANS[metric]
    df = table.df
    ok = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & df[col].notna().to_numpy()
    values = df[col].to_numpy(float)
    t_sent, t_done = df["t_sent"].to_numpy(float), df["t_done"].to_numpy(float)
    slo_name, q = SLO_STAT[metric]
    bound = getattr(info.slos, slo_name, None) if info is not None else None
    raw, unfinished = [], []
    cut = df["status"].isin(["cancelled", "timeout"]).to_numpy()
    for level_id, rows in table.level_rows().items():
        done = rows[ok[rows]]
        if done.size:
            raw.append((level_id, done, _load_of(df, done)))
        elif cut[rows].any():
            unfinished.append((level_id, rows[cut[rows]], _load_of(df, rows)))
    known = [(level_id, done, load) for level_id, done, load in raw if load is not None]
    base = min(known, key=lambda r: r[2]) if len(known) > 1 else None
    base_p50 = float(np.median(values[base[1]])) if base else None
    out = []
    for level_id, rows, load in raw:
        v = values[rows]
        p50, stat = float(np.median(v)), float(np.percentile(v, q))
        why, tail = "", np.empty(0, dtype=int)
        if bound is not None and stat > bound:
            why = f"{metric.upper()} P{q:g} {_ms(stat)} misses the SLO of {_ms(bound)}"
            tail = rows[v > bound]
        elif (
            base is not None
            and level_id != base[0]
            and base_p50 is not None
            and p50 >= STANDING_RATIO * base_p50
            and p50 - base_p50 >= MIN_EXCESS_S[metric]
        ):
            why = (
                f"{metric.upper()} median {_ms(p50)} is {p50 / base_p50:.1f}x the unloaded baseline's "
                f"{_ms(base_p50)} ({base[0]})"
            )
            tail = rows[v > STANDING_RATIO * base_p50]
        out.append(
            LevelLoad(
                level_id,
                load,
                int(rows.size),
                Window(float(np.nanmin(t_sent[rows])), float(np.nanmax(t_done[rows]))),
                p50,
                stat,
                bound,
                base[0] if base else None,
                base_p50,
                bool(why),
                why,
                tail,
            )
        )
    # A level in which no request finished is the worst tail of all: every request was cut off (the
    # level ended) or timed out; how long they had waited is a lower bound of their latency.
    for level_id, rows, load in unfinished:
        waited = t_done[rows] - t_sent[rows]
        waited = waited[np.isfinite(waited)]
        p50 = float(np.median(waited)) if waited.size else float("nan")
        first = (df["t_first_token"].to_numpy(float)[rows] - t_sent[rows]) if "t_first_token" in df else np.empty(0)
        first = first[np.isfinite(first)]
        # Streams cut off mid-answer are not streams that never answered: say which it was.
        answered = (
            f"; {first.size} had their first token (TTFT median {_ms(float(np.median(first)))})"
            if first.size
            else " without an answer"
        )
        why = f"no request finished: all {rows.size} were cut off or timed out, after {_ms(p50)} (median){answered}"
        out.append(
            LevelLoad(
                level_id,
                load,
                0,
                Window(float(np.nanmin(t_sent[rows])), float(np.nanmax(t_done[rows]))),
                p50,
                float(np.nanmax(waited)) if waited.size else p50,
                bound,
                base[0] if base else None,
                base_p50,
                True,
                why,
                rows,
                unfinished=True,
            )
        )
    return out


def baseline_of(levels: list[LevelLoad]) -> LevelLoad | None:
    for lv in levels:
        if lv.baseline_level == lv.level_id:
            return lv
    return None


def _ms(s: float) -> str:
    return f"{1e3 * s:.0f} ms" if s < 10 else f"{s:.1f} s"
