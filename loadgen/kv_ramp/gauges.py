"""What the ramp reads from the server's /metrics (ServerGauges, parsed by the caller's `parse_gauges`
on the probes' table of metric names) and the reading itself: a page that is missing or not
Prometheus text is told in one line, before any request is spent on it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable

from loadgen.kv_ramp.spec import RampError


@dataclass(frozen=True)
class ServerGauges:
    """What the ramp reads from one /metrics page, summed over label sets (KV usage: the fullest)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float | None = None
    preemptions: float = 0.0  # cumulative counter
    cache_config: dict[str, str] = field(default_factory=dict)  # vllm:cache_config_info's labels
    engine: str = "unknown"  # refengine | vllm | sglang | tgi | unknown (probes.prom)


async def scrape(client, url: str, parse_gauges: Callable[[str], ServerGauges]) -> ServerGauges:
    resp = await client.get(url + "/metrics", timeout=5.0)
    resp.raise_for_status()
    try:
        return parse_gauges(resp.text)
    except ValueError as exc:
        raise RampError(f"{url}/metrics is not Prometheus text: {exc}") from None


async def first_scrape(client, url: str, parse_gauges: Callable[[str], ServerGauges]) -> ServerGauges:
    """The page the ramp starts from; a server without one is told in one line."""
    import httpx

    try:
        return await scrape(client, url, parse_gauges)
    except httpx.HTTPStatusError as exc:
        raise RampError(
            f"{url}/metrics answered HTTP {exc.response.status_code}: the ramp reads running, "
            "waiting and KV usage from the server's Prometheus metrics, which this server does not "
            "export (vLLM, SGLang, TGI and refengine do; llama-cpp-python's server does not)"
        ) from None
    except httpx.HTTPError as exc:
        raise RampError(f"cannot reach {url}/metrics: {exc}") from None


def check_metrics(url: str, parse_gauges: Callable[[str], ServerGauges], api_key: str | None = None) -> ServerGauges:
    """Read the server's /metrics once, before any request is built: the ramp cannot run without
    it, so a server that has none is told so before the preflight and calibration spend requests
    (and before a model that ends a preflight at once can hide the real reason)."""
    import httpx

    async def once() -> ServerGauges:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with httpx.AsyncClient(headers=headers) as client:
            return await first_scrape(client, url, parse_gauges)

    return asyncio.run(once())


def cache_int(cache: dict[str, str], key: str) -> int | None:
    """An integer label of vllm:cache_config_info; None when the server leaves it out or unset."""
    value = cache.get(key)
    return int(value) if value not in (None, "", "None") else None
