"""A level's measured window (docs/metrics.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Window:
    """A level's measured window: requests sent inside it count; throughput divides by `seconds`."""

    seconds: float
    start: float | None = None  # epoch seconds, when known (the sweep records it in run.json)
    end: float | None = None
