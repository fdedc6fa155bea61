"""A level's timeline (the Plan), in epoch seconds, as the coordinator publishes it to the workers.

A fixed level (--warmup and --duration given) has its four times from the start. A sized level
(docs/metrics.md, "Sizing a level") starts with provisional times at its bounds: the window
starts at t_start + max_duration_s (a steady warm-up) and ends max_duration_s after its start (a
sized window). The coordinator (loadgen.sizing) may then move each of them once, earlier, to a
moment still ahead of it; a provisional time nobody moved becomes the real one when it comes.

Invariants: t_start <= window_start < window_end < hard_deadline; a moved time is never in the
past when it is announced, so no request already sent changes sides of the window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loadgen.specs import LevelSpec

DRAIN_GRACE_S = 1.0  # past the last in-window request's own deadline

# How the warm-up ended / the window ended: chosen by the user, by the sizing rule, or at the bound.
WARMUP_ENDS = ("fixed", "steady", "max")  # fixed: --warmup; steady: every user had finished a request
WINDOW_ENDS = ("fixed", "samples", "max")  # fixed: --duration; samples: the sample target was reached


@dataclass
class Plan:
    t_start: float
    window_start: float
    window_end: float
    hard_deadline: float  # every in-window request has finished or timed out by now
    warmup_end: str = "fixed"
    window_end_by: str = "fixed"

    def __post_init__(self) -> None:
        if not self.t_start <= self.window_start < self.window_end < self.hard_deadline:
            raise ValueError(f"a plan's times must increase, got {self}")
        if self.warmup_end not in WARMUP_ENDS or self.window_end_by not in WINDOW_ENDS:
            raise ValueError(f"unknown warm-up or window end: {self.warmup_end!r}, {self.window_end_by!r}")

    @classmethod
    def starting_at(cls, t_start: float, level: LevelSpec) -> "Plan":
        steady, sized = level.steady_warmup, level.sample_target is not None
        window_start = t_start + (level.bound_s if steady else level.warmup_s)
        window_end = window_start + (level.bound_s if sized else level.duration_s)
        return cls(
            t_start,
            window_start,
            window_end,
            _deadline(window_end, level),
            "max" if steady else "fixed",
            "max" if sized else "fixed",
        )

    def window_starting(self, t: float, level: LevelSpec) -> "Plan":
        """The warm-up is over (steady state) at t: the window starts then, its bound with it."""
        end = t + (level.bound_s if self.window_end_by == "max" else level.duration_s)
        return dataclasses.replace(
            self, window_start=t, window_end=end, hard_deadline=_deadline(end, level), warmup_end="steady"
        )

    def window_ending(self, t: float, level: LevelSpec) -> "Plan":
        """The window holds its sample target: it ends at t."""
        return dataclasses.replace(self, window_end=t, hard_deadline=_deadline(t, level), window_end_by="samples")

    def in_window(self, t_sent: float) -> bool:
        return self.window_start <= t_sent < self.window_end


def _deadline(window_end: float, level: LevelSpec) -> float:
    return window_end + level.request_timeout_s + DRAIN_GRACE_S
