"""What a sized level got, in words (docs/metrics.md, "Sizing a level"): the sweep prints one line
per level as it ends, and a level that ran into its bound keeps the words as a note.

  c64: 112 requests in 41 s (sized for P99; warm-up 27 s to steady state)
  c1: stopped at --max-duration 120 s with 31 requests: P99 from fewer than 100
"""

from __future__ import annotations

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from rundir import LevelMeta


def _s(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def _percentile_sized_for(target: int) -> str:
    return "P99" if target >= MIN_SAMPLES_FOR_P99 else f"{target} requests"


def bound_words(meta: LevelMeta, n: int, max_s: float | None) -> str | None:
    """Why a sized window ended at its bound, with what it held; None when it did not."""
    if meta.window_end_by != "max" or meta.sample_target is None:
        return None
    words = f"stopped at --max-duration {_s(max_s)} with {n} requests"
    if n < MIN_SAMPLES_FOR_P99:
        words += f": P99 from fewer than {MIN_SAMPLES_FOR_P99}"
    elif n < meta.sample_target:
        words += f", short of the {meta.sample_target} it was sized for"
    return words


def sizing_line(level_id: str, meta: LevelMeta, n: int, max_s: float | None) -> str | None:
    """The sweep's line for a level whose warm-up or window was sized; None for a fixed level."""
    if meta.warmup_end in (None, "fixed") and meta.window_end_by in (None, "fixed"):
        return None
    warm = {
        "steady": f"warm-up {_s(meta.warmup_s)} to steady state",
        "max": f"warm-up stopped at --max-duration {_s(max_s)} before every user had finished a request",
    }.get(meta.warmup_end or "")
    bound = bound_words(meta, n, max_s)
    if bound is not None:
        return f"{level_id}: {bound}" + (f" ({warm})" if warm else "")
    sized = (
        f"sized for {_percentile_sized_for(meta.sample_target)}"
        if meta.window_end_by == "samples" and meta.sample_target is not None
        else "--duration"
    )
    return f"{level_id}: {n} requests in {_s(meta.window_s)} ({sized}" + (f"; {warm})" if warm else ")")
