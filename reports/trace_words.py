"""What a level replayed of its trace, in words (rundir.trace_replay; docs/workloads.md, "Replay"):
the sweep prints it as each trace level ends, the report keeps it as the level's note.

  the trace (24 requests, 3.0 s) played once: 24 requests sent
  the trace (24 requests, 3.0 s) cycled 8.3 times to fill 25 s (--trace-loop): 201 requests sent
  the first 10 s of the trace (5000 requests, 410 s) played (--duration 10 s): 130 requests sent
"""

from __future__ import annotations

from rundir.trace_replay import TraceReplay

_WHY = {
    "--trace-loop": "--trace-loop",
    "--duration": "--duration longer than the trace",
    "capacity": "a capacity level lasts --warmup + --duration at every load",
}


def _s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def trace_words(t: TraceReplay) -> str:
    speed = f" at speed {t.speed:.3g}" if t.speed != 1 else ""
    trace = f"the trace ({t.requests} requests, {_s(t.pass_s)}{speed})"
    if t.play == "once":
        words = f"{trace} played once"
    elif t.play == "part":
        words = f"the first {_s(t.level_s)} of {trace} played"
        if t.cycled_by is None:
            words += " (--warmup + --duration shorter than the trace)"
    else:
        words = f"{trace} cycled {t.passes:.1f} times to fill {_s(t.level_s)} ({_WHY[t.cycled_by or '']})"
    return words if t.sent is None else f"{words}: {t.sent} requests sent"
