"""One level of the ramp as observed (LevelObservation: its answers, errors and /metrics samples) and
its saturation verdict: errors, preemptions, or requests waiting with the KV cache full (or full for
the next request), or waiting with it far from full (something other than KV caps concurrency)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

KV_FULL = 0.90  # KV usage at which the cache counts as saturated


@dataclass
class Sample:
    t: float
    running: float
    waiting: float
    kv_usage: float | None
    preemptions: float


@dataclass
class LevelObservation:
    concurrency: int
    ok: int = 0
    errors: int = 0
    error_text: str = ""
    samples: list[Sample] = field(default_factory=list)
    preemptions: float = 0.0  # during this level

    @property
    def max_running(self) -> int:
        return int(max((s.running for s in self.samples), default=0))

    @property
    def max_kv_usage(self) -> float | None:
        usage = [s.kv_usage for s in self.samples if s.kv_usage is not None]
        return max(usage) if usage else None

    @property
    def queued_fraction(self) -> float:
        return sum(s.waiting > 0 for s in self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def plateau_running(self) -> int | None:
        """Running while requests were held back (waiting > 0): what the server could hold at once.
        Without preemption that is the most it ever ran (dips are requests finishing between steps);
        with preemption running overshoots and is cut back, so take the median of the oscillation."""
        held = [s.running for s in self.samples if s.waiting > 0]
        if not held:
            return None
        return int(round(statistics.median(held) if self.preemptions > 0 else max(held)))

    @property
    def next_request_fits(self) -> bool | None:
        """While requests waited, did the free KV hold one more running request's share? Each
        running request holds about usage / running of the cache (unique prompts: nothing shared).
        A cache whose free part is smaller than that admits no one more, however far from 100% it
        reads: 8 of 15 blocks used, the next request needing 8, is full for it. None: no sample."""
        held = [s for s in self.samples if s.waiting > 0 and s.running > 0 and s.kv_usage is not None]
        if not held:
            return None
        usage = statistics.median([s.kv_usage for s in held if s.kv_usage is not None])
        running = statistics.median(s.running for s in held)
        return 1.0 - usage >= usage / running

    def full_by_the_count(self, fits: int | None) -> bool:
        """Requests waited, the gauges did not show room for one more, and the server's published
        cache (rundir.kv_cache: `fits` requests of this size at once) holds fewer than the level
        sends, no more ever running: a request that fills the cache lives a few steps, and scrapes
        between two requests read it empty, so the gauges alone can miss a cache full for the next."""
        return (
            fits is not None
            and self.queued_fraction >= 0.5
            and self.next_request_fits is not True
            and self.max_running <= fits < self.concurrency
        )

    def saturation(self, fits: int | None = None) -> list[str]:
        """Why this level saturated ([] if it did not); `fits`: requests of the ramp's size the
        server's published cache holds at once (None: not published)."""
        why = []
        if self.errors:
            why.append(f"{self.errors} errors ({self.error_text})")
        if self.preemptions > 0:
            why.append(f"{self.preemptions:g} preemptions")
        if self.queued_fraction >= 0.5 and (self.max_kv_usage or 0) >= KV_FULL:
            why.append(f"KV {self.max_kv_usage:.0%} full with requests waiting")
        elif self.queued_fraction >= 0.5 and self.next_request_fits is False:
            why.append(
                f"requests waiting with KV {(self.max_kv_usage or 0):.0%} full: "
                "the free part is smaller than one more request needs"
            )
        elif self.full_by_the_count(fits):
            why.append(
                f"requests waiting with KV {(self.max_kv_usage or 0):.0%} full: "
                f"the free part is smaller than one more request needs (the server's cache holds {fits} at once)"
            )
        elif self.queued_fraction >= 0.5:
            why.append(
                f"requests waiting with KV only {(self.max_kv_usage or 0):.0%} full "
                "(max_num_seqs or the token budget caps concurrency before KV does)"
            )
        return why
