"""How calibration times a call: the fastest of several (others on a shared machine only ever add time)."""

from __future__ import annotations

import time
from collections.abc import Callable

# Bytes a measurement reads between calls so that each reads its operands from memory, as in a
# model's step (matmul weights rotated through, attention contexts flushed from the CPU's caches).
WEIGHTS_WORKING_SET = 256 << 20


def timed(fn: Callable[[], object], repeats: int, min_total_s: float = 0.05, max_calls: int = 50) -> float:
    """The fastest call (others on a shared machine only ever add time), of at least `repeats` calls and
    enough of them to fill `min_total_s`, at most `max_calls`."""
    fn()
    out: list[float] = []
    while len(out) < repeats or (sum(out) < min_total_s and len(out) < max_calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)
