"""A level whose prompts the server already had in its prefix cache, by the server's own count.

Each level of a sweep sends prompts of its own (docs/metrics.md, "Every level's prompts are its
own"), and a `random` or `mixed` workload's prompts share nothing with each other. So a server that
finds a good share of such a level's prompt tokens in its prefix cache (its hit and query counters,
read by the server probe) had seen them before: another run with the same --seed against the same
server, or a client that resends. Their TTFT is a cache hit's, a fraction of a fresh prompt's (a
third of a window's prompts were such hits, TTFT 0.09 s against 0.40 s, in runs recorded before
each level had its own prompts), so the level's TTFT does not describe the workload it names.
"""

from __future__ import annotations

import numpy as np

from analyzers.probe_series import ProbeSeries, rows_covering

# Workloads whose prompts share no prefix by construction; the others share on purpose.
UNSHARED_KINDS = ("random", "mixed")
# Above this share of prompt tokens found in the cache, the level's TTFT is mostly of cached prompts'.
CACHED_SHARE_NOTE = 0.10
MIN_PROMPT_TOKENS = 1_000  # fewer prompt tokens in the window say nothing either way
CACHED_NOTE_OPENING = "the server found this level's prompts in its prefix cache"  # the run's finding keys on it


def window_hit_rate(series: ProbeSeries | None, start: float | None, end: float | None) -> float | None:
    """The server's prefix-cache hit rate over [start, end]: its per-interval rates weighted by the
    interval's prompt tokens; None without a server probe, a window, or enough prompt tokens."""
    if series is None or start is None or end is None or len(series) == 0:
        return None
    rate, tokens = series.numeric.get("prefix_cache_hit_rate"), series.numeric.get("prompt_tokens")
    if rate is None or tokens is None:
        return None
    inside = rows_covering(series, start, end) & np.isfinite(rate) & np.isfinite(tokens)
    total = float(tokens[inside].sum())
    if total < MIN_PROMPT_TOKENS:
        return None
    return float((rate[inside] * tokens[inside]).sum() / total)


def cached_prompts_words(hit_rate: float | None, workload_kind: str) -> str | None:
    """The level's note when the server found its unshared prompts cached; None otherwise."""
    if hit_rate is None or workload_kind not in UNSHARED_KINDS or hit_rate < CACHED_SHARE_NOTE:
        return None
    return (
        f"{CACHED_NOTE_OPENING} ({hit_rate:.0%} of their tokens), on a {workload_kind} workload whose "
        "prompts share nothing: it had seen them before, from an earlier run with the same --seed "
        "against this server or another client, so the TTFT here is partly a cache hit's; rerun with "
        "another --seed or a fresh server"
    )
