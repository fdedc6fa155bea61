"""The ramp's loop (run_ramp): the first /metrics page (the block count), then each level's users
added and /metrics scraped on one clock until a level saturates, every request of one fails, or
the last level is reached."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from loadgen.kv_ramp.gauges import ServerGauges, cache_int, first_scrape, scrape
from loadgen.kv_ramp.observation import LevelObservation, Sample
from loadgen.kv_ramp.result import RampResult
from loadgen.kv_ramp.spec import RampSpec
from loadgen.kv_ramp.users import RampUsers
from rundir.kv_cache import KVCacheSize


async def _watch_level(
    client,
    spec: RampSpec,
    parse_gauges: Callable[[str], ServerGauges],
    level: LevelObservation,
    last_preemptions: float,
) -> None:
    """Scrape /metrics every scrape_interval_s for the level's seconds; a failed scrape counts as an error."""
    import httpx

    end = time.monotonic() + spec.level_seconds
    while time.monotonic() < end:
        await asyncio.sleep(spec.scrape_interval_s)
        try:
            m = await scrape(client, spec.target, parse_gauges)
        except httpx.HTTPError as exc:
            level.errors += 1
            level.error_text = f"/metrics: {exc}"[:160]
            continue
        level.samples.append(Sample(time.time(), m.running, m.waiting, m.kv_usage, m.preemptions))
        level.preemptions = m.preemptions - last_preemptions


def _stop_reason(level: LevelObservation, fits: int | None) -> str | None:
    """Why the ramp stops after this level, or None to go on to the next."""
    if level.errors and not level.ok:
        return f"every request failed at concurrency {level.concurrency}: {level.error_text}"
    why = level.saturation(fits)
    if why:
        return f"saturated at concurrency {level.concurrency}: " + "; ".join(why)
    return None


async def run_ramp(
    spec: RampSpec, parse_gauges: Callable[[str], ServerGauges], make_body: Callable[[int], dict], on_level=None
) -> RampResult:
    """Drive the ramp; `parse_gauges` reads a /metrics page, `make_body(i)` is the i-th request's JSON
    body, `on_level(observation)` is called after each level (progress output)."""
    import httpx

    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=spec.request_timeout_s) as client:
        first = await first_scrape(client, spec.target, parse_gauges)
        num_blocks = cache_int(first.cache_config, "num_gpu_blocks")
        block_size = cache_int(first.cache_config, "block_size")
        cache = KVCacheSize(num_blocks, block_size, first.engine) if num_blocks and block_size else None
        fits = cache.requests_that_fit(spec.request_tokens) if cache is not None and cache.usable_blocks else None
        users = RampUsers(client, spec, make_body)
        levels: list[LevelObservation] = []
        last_preemptions = first.preemptions
        stop_reason = f"reached the last level ({spec.levels[-1]}) without saturating"
        try:
            for concurrency in spec.levels:
                level = users.level = LevelObservation(concurrency)
                levels.append(level)
                users.grow_to(concurrency)
                await _watch_level(client, spec, parse_gauges, level, last_preemptions)
                if level.samples:
                    last_preemptions = level.samples[-1].preemptions
                if on_level is not None:
                    on_level(level)
                reason = _stop_reason(level, fits)
                if reason:
                    stop_reason = reason
                    break
        finally:
            await users.stop()
    return RampResult(spec, num_blocks, block_size, levels, stop_reason, users.completion_tokens, first.engine)
