"""TraceReplay: how a level replayed a trace (run.json's `level_meta[level].trace`).

A trace is played once by default: the level lasts the trace's span at its speed. It cycles
only when asked: `--trace-loop`, a `--duration` longer than the trace, or a capacity search,
whose levels have a fixed length at every speed (docs/workloads.md, "Replay"). A level
shorter than the trace plays its first part. The record says which, so nobody mistakes 201
requests of a cycled 24-request trace for the trace.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Why a trace cycled: the user's flag, a --duration longer than the trace, a capacity search.
TRACE_LOOP_REASONS = ("--trace-loop", "--duration", "capacity")
TRACE_PLAYS = ("once", "part", "cycled")


@dataclass(frozen=True)
class TraceReplay:
    requests: int  # the trace's requests (after --trace-limit)
    span_s: float  # one pass at speed 1: first to last arrival plus one mean gap
    speed: float  # the time scale (2: twice as fast)
    level_s: float  # the warm-up and window the level was planned for
    cycled_by: str | None = None  # TRACE_LOOP_REASONS; None: played at most once
    sent: int | None = None  # requests the level sent (its records), once it ran

    def __post_init__(self) -> None:
        if self.requests < 1 or not self.span_s > 0 or not self.speed > 0 or not self.level_s > 0:
            raise ValueError(f"a trace replay needs requests >= 1 and a span, speed and level > 0, got {self}")
        if self.cycled_by is not None and self.cycled_by not in TRACE_LOOP_REASONS:
            raise ValueError(f"cycled_by must be one of {TRACE_LOOP_REASONS} or None, got {self.cycled_by!r}")
        if self.sent is not None and self.sent < 0:
            raise ValueError(f"sent must be >= 0, got {self.sent}")

    @property
    def pass_s(self) -> float:
        """One pass of the trace at this speed, in seconds."""
        return self.span_s / self.speed

    @property
    def passes(self) -> float:
        """Passes of the trace the level's length holds (at most 1 when it does not cycle)."""
        n = self.level_s / self.pass_s
        return n if self.cycled_by is not None else min(1.0, n)

    @property
    def play(self) -> str:
        """once: the whole trace one time; part: its first part; cycled: more than once."""
        if self.passes < 1.0 - 1e-9:
            return "part"
        return "cycled" if self.cycled_by is not None and self.passes > 1.0 + 1e-9 else "once"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, d: "TraceReplay | dict[str, Any] | None") -> "TraceReplay | None":
        """From run.json's object (keys this version does not know are dropped: it is a record, not a plan)."""
        if d is None or isinstance(d, TraceReplay):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"a level's trace replay is an object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
