"""The measured window of a simulated level, fixed or sized the way the sweep sizes it.

The sweep (docs/metrics.md, "Sizing a level") warms a closed-loop level up for at least warmup_s
and until every user has finished a request, then measures for at least duration_s and until the
window holds sample_target requests, each bounded by max_duration_s; a decided time lies
`lead_s` ahead of the moment it was decided (the load generator announces it to its workers). A
prediction has to use the same rule: the sweep's default levels are sized, and a level whose first
wave outlasts a fixed warm-up measures later waves than the fixed window would (`tiny` at
concurrency 16 on two cores: a first wave of 512-token prompts takes 11 s).

Times only move forward past the present, as the sweep's do: a request's in-window flag, set when
it is sent, never changes; steps and tokens before a decision lie outside the window either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError


@dataclass(frozen=True)
class WindowSizing:
    """How a level's window is sized (the sweep's LevelSpec fields of the same names)."""

    steady_warmup: bool = False  # closed loop: warm up until every user has finished a request
    sample_target: int | None = None  # end the window once it holds this many requests
    max_duration_s: float | None = None  # the bound of a sized warm-up and of a sized window (each)
    lead_s: float = 0.0  # a decided time lies this far ahead of the decision

    def __post_init__(self) -> None:
        sized = self.steady_warmup or self.sample_target is not None
        if sized and (self.max_duration_s is None or self.max_duration_s <= 0):
            raise DiagnosisError("a sized warm-up or window needs a positive max_duration_s bound")
        if self.sample_target is not None and self.sample_target < 1:
            raise DiagnosisError("a sample target must be at least 1 request")
        if self.lead_s < 0:
            raise DiagnosisError("a decision's lead must be >= 0 s")


FIXED = WindowSizing()


class LevelWindow:
    """Where a level's window lies now: provisional (at its bounds) until the rules decide it."""

    def __init__(self, warmup_s: float, duration_s: float, sizing: WindowSizing = FIXED):
        self.warmup_s, self.duration_s, self.sizing = warmup_s, duration_s, sizing
        bound = sizing.max_duration_s or 0.0
        self.lo = bound if sizing.steady_warmup else warmup_s
        self.hi = self.lo + (bound if sizing.sample_target is not None else duration_s)
        self.warmup_end = "max" if sizing.steady_warmup else "fixed"
        self.window_end_by = "max" if sizing.sample_target is not None else "fixed"
        self.latest_end = self.hi  # no decision moves the window past its provisional end

    def contains(self, t: float) -> bool:
        return self.lo <= t < self.hi

    def every_user_warm(self, now: float) -> None:
        """Every user has finished a request: a steady warm-up ends (at least warmup_s in)."""
        if self.warmup_end != "max" or now + self.sizing.lead_s >= self.lo:
            return
        self.lo = max(now + self.sizing.lead_s, self.warmup_s)
        bound = self.sizing.max_duration_s or 0.0
        self.hi = self.lo + (bound if self.window_end_by == "max" else self.duration_s)
        self.warmup_end = "steady"

    def holds(self, now: float, requests: int) -> None:
        """The window holds `requests` (sent in it, finished or not): a sized window ends at its target."""
        target = self.sizing.sample_target
        if (
            target is None
            or self.window_end_by != "max"
            or not self.lo <= now
            or now + self.sizing.lead_s >= self.hi
            or requests < target
        ):
            return
        # Just past the decision: the requests counted were sent at or before `now`, and a window
        # ends before its end time (with no lead, one sent at `now` would fall out of the count).
        self.hi = max(math.nextafter(now + self.sizing.lead_s, math.inf), self.lo + self.duration_s)
        self.window_end_by = "samples"

    def notes(self) -> set[str]:
        out = set()
        if self.warmup_end == "max":
            out.add("the warm-up reached its bound before every user had finished a request")
        if self.window_end_by == "max":
            out.add("the window reached its bound before it held its sample target")
        return out
