"""A level's throughput: what ARRIVED inside its measured window, and a block-bootstrap interval.

docs/metrics.md: output tokens/s, total tokens/s and requests/s count the tokens that arrived
inside the window, by their timestamps, and the requests that finished inside it, so a rate is
not quantized to whole requests and a request in flight at an edge counts for the part of it
that fell inside. Every request of the level counts, also those sent during the warm-up whose
tokens stream into the window, and those cut off or broken after some tokens (what arrived did
arrive; their count is the client's); requests/s and goodput count successful requests only.

- An output token's time: a record's chunk times are `t_first_token`, then `t_first_token` plus
  the cumulative inter-token gaps (`itl_s`). When a record has fewer chunks than tokens (a server
  that sends multi-token chunks) or more, its tokens are spread evenly over its chunks (each
  chunk carries tokens / chunks). A record with no gaps at all and no chunk count (older or
  foreign records) has its tokens spread evenly from its first token to its end.
- Prompt tokens count when the first token arrives: that is when the server has demonstrably
  processed the prompt (total tokens/s = prompt + output tokens arrived in the window).
- Requests (and goodput: those that met every SLO) count when they finished (`t_done`).

The interval is a block bootstrap over time: the window is cut into slices, each slice holds
the tokens (requests) that arrived in it, and slices are resampled with replacement, the same
resample for every rate. A steady level gives nearly equal slices, hence a tight interval; a
bursty one a wide interval. Older runs whose window has no recorded start begin it at the
first in-window send.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.stats.distribution import BOOTSTRAP_RESAMPLES, interval
from analyzers.stats.slo import Slos
from analyzers.stats.window import Window
from rundir.table import RequestTable

THROUGHPUT_SLICES = 20  # time slices of the measured window for the block bootstrap
MIN_SLICE_S = 0.25  # ... but no slice shorter than this (a short window gets fewer)
RATES = ("output tok/s", "total tok/s", "requests/s", "goodput req/s")


@dataclass
class Rates:
    """A level's rates over its window, with bootstrap draws of each (same resamples for all)."""

    values: dict[str, float]
    draws: dict[str, np.ndarray] = field(default_factory=dict)

    def ci(self, name: str) -> list[float] | None:
        d = self.draws.get(name)
        return None if d is None else interval(d)


def window_bounds(window: Window, t_sent_in_window: np.ndarray) -> tuple[float, float] | None:
    """(start, end) epoch seconds of a window; None when it cannot be placed in time."""
    start = window.start
    if start is None:
        sent = t_sent_in_window[~np.isnan(t_sent_in_window)]
        if sent.size == 0:
            return None
        start = float(sent.min())
    end = window.end if window.end is not None else start + window.seconds
    return float(start), float(max(end, start + 1e-9))


def token_arrivals(table: RequestTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, tokens) of the output tokens of `rows` (module docstring): one entry per chunk, or per
    token where a record's tokens are spread from its first token to its end."""
    df = table.df
    n = len(df)
    t_first = df["t_first_token"].to_numpy(float)[rows]
    t_done = df["t_done"].to_numpy(float)[rows]
    out = df["out_tokens"].to_numpy(float)[rows]
    chunks_known = df["client_token_chunks"].to_numpy(float)[rows]
    n_gaps = df["n_itl"].to_numpy()[rows] if "n_itl" in df else np.zeros(rows.size, dtype=np.int64)
    has = ~np.isnan(t_first) & (out > 0)
    # Records without gaps and without a chunk count: spread from the first token to the end.
    spread = has & (n_gaps == 0) & np.isnan(chunks_known) & (out > 1) & ~np.isnan(t_done) & (t_done > t_first)
    chunked = has & ~spread
    times, weights = [], []
    # First chunk of every chunked record.
    per_chunk = np.where(chunked, out / (n_gaps + 1), 0.0)
    times.append(t_first[chunked])
    weights.append(per_chunk[chunked])
    if table.itl.size:
        mask = np.zeros(n, dtype=bool)
        mask[rows[chunked & (n_gaps > 0)]] = True
        sel = mask[table.itl_row]
        gaps, gap_row = table.itl[sel], table.itl_row[sel]
        if gaps.size:
            cs = np.cumsum(gaps)
            starts = np.r_[True, gap_row[1:] != gap_row[:-1]]  # gaps are stored in row order
            group_start = np.maximum.accumulate(np.where(starts, np.arange(gaps.size), 0))
            offset = (cs - gaps)[group_start]  # the gaps of earlier records
            pos = np.full(n, -1)
            pos[rows] = np.arange(rows.size)
            local = pos[gap_row]
            times.append(t_first[local] + (cs - offset))
            weights.append(per_chunk[local])
    if spread.any():
        k = out[spread].astype(np.int64)
        owner = np.repeat(np.arange(k.size), k)
        step = np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)
        frac = step / np.maximum(k[owner] - 1, 1)
        times.append(t_first[spread][owner] + frac * (t_done[spread] - t_first[spread])[owner])
        weights.append(np.ones(owner.size))
    return np.concatenate(times), np.concatenate(weights)


def level_rates(
    table: RequestTable,
    rows: np.ndarray,
    window: Window,
    slos: Slos,
    rng: np.random.Generator,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Rates:
    """The rates of one level (or request class): `rows` are all its records."""
    df = table.df
    status = df["status"].to_numpy()[rows]
    in_win = df["in_window"].to_numpy()[rows]
    ok_rows = rows[status == "ok"]
    bounds = window_bounds(window, df["t_sent"].to_numpy(float)[rows][in_win])
    zero = {name: 0.0 for name in RATES}
    if bounds is None:
        return Rates(zero)
    start, end = bounds
    seconds = window.seconds
    tok_t, tok_w = token_arrivals(table, rows)
    if tok_t.size == 0 and ok_rows.size == 0:
        return Rates(zero)
    t_first = df["t_first_token"].to_numpy(float)[ok_rows]
    prompt = df["in_tokens"].to_numpy(float)[ok_rows]
    t_done = df["t_done"].to_numpy(float)[ok_rows]
    good = slos.request_meets(*(df[c].to_numpy(float)[ok_rows] for c in ("ttft_s", "tpot_s", "e2e_s")))
    k = int(max(1, min(THROUGHPUT_SLICES, (end - start) // MIN_SLICE_S)))
    edges = np.linspace(start, end, k + 1)

    def per_slice(t: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        inside = (t >= start) & (t <= end)
        s = np.clip(np.searchsorted(edges, t[inside], side="right") - 1, 0, k - 1)
        return np.bincount(s, weights=None if w is None else w[inside], minlength=k).astype(float)

    out_s = per_slice(tok_t, tok_w)
    slices = {
        "output tok/s": out_s,
        "total tok/s": out_s + per_slice(t_first, prompt),
        "requests/s": per_slice(t_done),
        "goodput req/s": per_slice(t_done[good]),
    }
    idx = rng.integers(0, k, size=(resamples, k))
    return Rates(
        {name: float(v.sum()) / seconds for name, v in slices.items()},
        {name: v[idx].sum(axis=1) / seconds for name, v in slices.items()},
    )
