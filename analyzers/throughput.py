"""A level's throughput and its bootstrap interval (output tokens/s, requests/s over the window)."""

from __future__ import annotations

import numpy as np

from analyzers.distribution import interval, sum_draws
from analyzers.window import Window

THROUGHPUT_SLICES = 20          # time slices of the measured window for throughput's block bootstrap


def throughput_draws(t_sent: np.ndarray, out_tokens: np.ndarray, window: Window,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws of (output tok/s, requests/s): the window cut into time slices by send time,
    slices resampled with replacement (see distribution.sum_draws)."""
    if t_sent.size == 0:
        return np.full(1, np.nan), np.full(1, np.nan)
    start = window.start if window.start is not None else float(t_sent.min())
    end = window.end if window.end is not None else float(t_sent.max())
    k = int(min(THROUGHPUT_SLICES, t_sent.size))
    edges = np.linspace(start, max(end, start + 1e-9), k + 1)
    slice_of = np.clip(np.searchsorted(edges, t_sent, side="right") - 1, 0, k - 1)
    tokens = np.bincount(slice_of, weights=out_tokens, minlength=k)
    requests = np.bincount(slice_of, minlength=k).astype(float)
    return sum_draws(tokens, rng) / window.seconds, sum_draws(requests, rng) / window.seconds


def throughput_cis(t_sent, out_tokens, window, rng):
    tok, req = throughput_draws(t_sent, out_tokens, window, rng)
    return interval(tok), interval(req)
