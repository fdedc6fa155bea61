"""Server stalls: stretches inside a level's measured window in which requests were in flight and
no token reached any of them.

A frozen server is invisible to the window's percentiles when the requests that saw the freeze
were sent during warm-up (a closed loop sends nothing new while its users wait), so every request
of the level in flight during the window counts here, wherever it was sent. Token arrival times
are each request's first token plus its cumulative inter-token gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.stats.window import Window
from rundir.table import RequestTable

STALL_MIN_S = 2.0  # shorter silences are ordinary (a long prefill step, a GC pause)
STALL_GAP_FACTOR = 20.0  # ... and a stall is this many times the level's median token gap
STALL_TTFT_FACTOR = 2.0  # ... and twice the level's P90 TTFT (a long prefill is silent too)


@dataclass(frozen=True)
class Stall:
    seconds: float
    start: float  # epoch seconds
    end: float
    in_flight: int  # requests waiting through it


def token_arrivals(table: RequestTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrival time of every token-carrying chunk of these rows (first tokens and the gaps after them)
    and the row each belongs to, in time order."""
    df = table.df
    rows = np.asarray(rows, dtype=int)
    first_all = df["t_first_token"].to_numpy(float)
    first = first_all[rows]
    has = ~np.isnan(first)
    times, owners = [first[has]], [rows[has]]
    if table.itl.size:
        mask = np.zeros(len(df), dtype=bool)
        mask[rows] = True
        sel = mask[table.itl_row]
        gaps, owner = table.itl[sel], table.itl_row[sel]
        if gaps.size:
            # cumulative gaps restart at each request: subtract the running sum at each owner's start
            csum = np.cumsum(gaps)
            starts = np.r_[0, np.flatnonzero(np.diff(owner)) + 1]
            base = np.repeat(np.r_[0.0, csum[starts[1:] - 1]], np.diff(np.r_[starts, gaps.size]))
            times.append(first_all[owner] + (csum - base))
            owners.append(owner)
    t, o = np.concatenate(times), np.concatenate(owners)
    order = np.argsort(t, kind="stable")
    return t[order], o[order]


def token_times(table: RequestTable, rows: np.ndarray) -> np.ndarray:
    """Arrival time of every token of these rows (first tokens and the gaps after them), sorted."""
    return token_arrivals(table, rows)[0]


def longest_stall(table: RequestTable, rows: np.ndarray, window: Window) -> Stall | None:
    """The longest silence inside the window with requests in flight, when it counts as a stall."""
    if window.start is None or window.end is None or rows.size == 0:
        return None
    df = table.df
    sent = df["t_sent"].to_numpy()[rows]
    done = np.nan_to_num(df["t_done"].to_numpy()[rows], nan=np.inf)
    times = token_times(table, rows)
    if times.size < 2:
        return None
    median_gap = float(np.median(np.diff(times)))
    level_ttft = df["ttft_s"].to_numpy()[rows]
    ttft = level_ttft[df["in_window"].to_numpy()[rows]]
    ttft = ttft[~np.isnan(ttft)]
    if not ttft.size:  # nobody was sent in the window: the warm-up cohort's prefills are the yardstick
        ttft = level_ttft[~np.isnan(level_ttft)]
    threshold = max(
        STALL_MIN_S,
        STALL_GAP_FACTOR * median_gap,
        STALL_TTFT_FACTOR * float(np.percentile(ttft, 90)) if ttft.size else 0.0,
    )
    inside = times[(times > window.start) & (times < window.end)]
    events = np.r_[window.start, inside, window.end]
    gaps = np.diff(events)
    order = np.argsort(gaps)[::-1]
    for i in order[:5]:  # the few longest silences: is anybody waiting through it?
        a, b = events[i], events[i + 1]
        waiting = int(((sent <= a) & (done >= b)).sum())
        if waiting and gaps[i] >= threshold:
            return Stall(float(gaps[i]), float(a), float(b), waiting)
    return None
