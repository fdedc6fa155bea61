"""A level's failed requests counted by error kind, with one error text of each kind (LevelStats's
errors_by_kind and error_samples)."""

from __future__ import annotations

import numpy as np


def error_breakdown(kinds: np.ndarray, texts: np.ndarray) -> tuple[dict[str, int], dict[str, str]]:
    """Failed requests counted by error kind, with one error text of each kind."""
    counts: dict[str, int] = {}
    samples: dict[str, str] = {}
    for kind, text in zip(kinds, texts):
        key = kind if isinstance(kind, str) and kind else "unknown"  # null arrives as None or NaN
        counts[key] = counts.get(key, 0) + 1
        if isinstance(text, str) and text and key not in samples:
            samples[key] = text[:500]
    return counts, samples
