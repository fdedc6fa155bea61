"""The ramp's answer (RampResult): the capacity observed at the first saturated level against the
estimate from the server's own block count, usable blocks // blocks per request, within TOLERANCE."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.kv_ramp.observation import KV_FULL, LevelObservation
from loadgen.kv_ramp.spec import RampSpec
from rundir.kv_cache import KVCacheSize

TOLERANCE = 0.10  # observed vs estimate, the yardstick


@dataclass
class RampResult:
    spec: RampSpec
    num_blocks: int | None
    block_size: int | None
    levels: list[LevelObservation]
    stop_reason: str
    completion_tokens_seen: set[int] = field(default_factory=set)
    engine: str = "unknown"

    @property
    def cache(self) -> KVCacheSize | None:
        """The server's own count of its KV cache (rundir.kv_cache: the diagnosis reads the same)."""
        if not self.num_blocks or not self.block_size:
            return None
        return KVCacheSize(self.num_blocks, self.block_size, self.engine)

    @property
    def usable_blocks(self) -> int | None:
        return None if self.cache is None else self.cache.usable_blocks

    @property
    def estimate(self) -> int | None:
        if self.cache is None or not self.cache.usable_blocks:
            return None
        return self.cache.requests_that_fit(self.spec.request_tokens)

    @property
    def saturated_level(self) -> LevelObservation | None:
        return next((lv for lv in self.levels if lv.saturation(self.estimate)), None)

    @property
    def all_failed(self) -> bool:
        """The ramp stopped because a level's requests all failed (a refusal, not saturation)."""
        level = self.saturated_level
        return level is not None and level.ok == 0 and level.errors > 0

    @property
    def observed_capacity(self) -> int | None:
        level = self.saturated_level
        if level is None or self.all_failed:
            return None
        return level.plateau_running or level.max_running

    @property
    def kv_limited(self) -> bool:
        level = self.saturated_level
        return level is not None and (
            level.preemptions > 0
            or (level.max_kv_usage or 0) >= KV_FULL
            or (level.queued_fraction >= 0.5 and level.next_request_fits is False)
            or level.full_by_the_count(self.estimate)
        )

    def within_tolerance(self) -> bool | None:
        if self.observed_capacity is None or self.estimate is None:
            return None
        return abs(self.observed_capacity - self.estimate) <= TOLERANCE * self.estimate
