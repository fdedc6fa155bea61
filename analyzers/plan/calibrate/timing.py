"""How calibration times a call: the fastest of several (others on a shared machine only ever add time).

On a GPU a call returns when its kernels are queued, not done. The engine queues a step's kernels back
to back and waits once (at sampling), so an operator costs it the larger of its launch and its kernel
time; calibration times that the same way: GPU_BATCH calls queued back to back, then a synchronize,
per call the batch's time over its calls (a synchronize per call would add its own round trip to each).
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Bytes a measurement reads between calls so that each reads its operands from memory, as in a
# model's step (matmul weights rotated through, attention contexts flushed from the CPU's caches).
WEIGHTS_WORKING_SET = 256 << 20
GPU_BATCH = 10  # calls queued per synchronize on a GPU


def timed(
    fn: Callable[[], object],
    repeats: int,
    min_total_s: float = 0.05,
    max_calls: int = 50,
    sync: Callable[[], None] | None = None,
) -> float:
    """The fastest call (others on a shared machine only ever add time), of at least `repeats` calls and
    enough of them to fill `min_total_s`, at most `max_calls`; with `sync` (a GPU), the fastest batch of
    GPU_BATCH queued calls, per call."""
    if sync is not None:
        return _timed_queued(fn, repeats, sync)
    fn()
    out: list[float] = []
    while len(out) < repeats or (sum(out) < min_total_s and len(out) < max_calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def _timed_queued(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    fn()  # the first call compiles (Triton) or packs; not timed
    sync()
    out: list[float] = []
    for _ in range(max(repeats, 3)):
        t0 = time.perf_counter()
        for _ in range(GPU_BATCH):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / GPU_BATCH)
    return min(out)
