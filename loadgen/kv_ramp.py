"""The seed's ramp (section 5.2): concurrency 1, then up step by step until errors, preemptions or
a saturated KV cache; the running count where it saturates is the server's real KV capacity.

Load: a small asyncio + httpx closed loop, not loadgen's locust levels. The ramp has to add users
one level at a time *without draining* (a drained level never fills the cache), scrape `/metrics`
every 100 ms on the same clock, and stop at the first saturated level; locust levels are separate
processes with warm-up and measured windows, built for latency statistics, and take seconds to
start. Requests have a known length: the caller's `make_body(i)` builds them with the sweep's own
request building (text prompts sized by the server's count, unique per request so prefix caching
cannot share blocks, the fields the preflight found refused left out), non-streaming.
A level where every request failed stops the ramp with the server's own message: that is a
refused request, not a capacity of zero.

Estimate: usable blocks // ceil((prompt + max_tokens) / block_size), from the server's own
`vllm:cache_config_info` (num_gpu_blocks, block_size; vLLM v1 reserves one of them, RESERVED_BLOCKS). Requests whose prompt already occupies all
the blocks the finished request needs (prompt and output within one block edge) never grow by a
block mid-decode, so admission alone decides how many run and nothing is preempted; otherwise the
server admits on prompt blocks, then preempts as requests grow, and the capacity is read from the
oscillation.

Metric names: the ramp does not parse /metrics itself. Its caller passes `parse_gauges` (text ->
ServerGauges), built on the probes' one table of each engine's metric names (probes.prom), so
the ramp, the probes and the target facts read the same names the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


class RampError(ValueError):
    """A ramp that cannot run as asked (bad spec, unreachable target): one line for the user."""


@dataclass(frozen=True)
class ServerGauges:
    """What the ramp reads from one /metrics page, summed over label sets (KV usage: the fullest)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float | None = None
    preemptions: float = 0.0  # cumulative counter
    cache_config: dict[str, str] = field(default_factory=dict)  # vllm:cache_config_info's labels
    engine: str = "unknown"  # refengine | vllm | sglang | tgi | unknown (probes.prom)


KV_FULL = 0.90  # KV usage at which the cache counts as saturated
# Blocks an engine counts in num_gpu_blocks but never gives a request: vLLM v1's block pool takes
# one "null block" out of the free queue at start (its KV usage gauge is over the rest).
RESERVED_BLOCKS = {"vllm": 1}
TOLERANCE = 0.10  # observed vs estimate, the yardstick


@dataclass(frozen=True)
class RampSpec:
    target: str
    prompt_tokens: int = 1000
    max_tokens: int = 8
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    level_seconds: float = 5.0
    scrape_interval_s: float = 0.1
    request_timeout_s: float = 300.0
    model: str | None = None
    api_key: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.target.startswith(("http://", "https://")):
            raise RampError(f"--target must be a URL like http://127.0.0.1:8000, got {self.target!r}")
        if self.prompt_tokens < 1 or self.max_tokens < 1:
            raise RampError("prompt and max tokens must be >= 1")
        if not self.levels or list(self.levels) != sorted(set(self.levels)) or self.levels[0] < 1:
            raise RampError("ramp levels must be increasing positive concurrencies")
        if self.level_seconds <= 0:
            raise RampError("level seconds must be > 0")

    @property
    def request_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


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

    def saturation(self) -> list[str]:
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
        elif self.queued_fraction >= 0.5:
            why.append(
                f"requests waiting with KV only {(self.max_kv_usage or 0):.0%} full "
                "(max_num_seqs or the token budget caps concurrency before KV does)"
            )
        return why


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
    def usable_blocks(self) -> int | None:
        return None if not self.num_blocks else self.num_blocks - RESERVED_BLOCKS.get(self.engine, 0)

    @property
    def estimate(self) -> int | None:
        if not self.usable_blocks or not self.block_size:
            return None
        return self.usable_blocks // -(-self.spec.request_tokens // self.block_size)

    @property
    def saturated_level(self) -> LevelObservation | None:
        return next((lv for lv in self.levels if lv.saturation()), None)

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
        )

    def within_tolerance(self) -> bool | None:
        if self.observed_capacity is None or self.estimate is None:
            return None
        return abs(self.observed_capacity - self.estimate) <= TOLERANCE * self.estimate


async def _scrape(client, url: str, parse_gauges: Callable[[str], ServerGauges]) -> ServerGauges:
    resp = await client.get(url + "/metrics", timeout=5.0)
    resp.raise_for_status()
    try:
        return parse_gauges(resp.text)
    except ValueError as exc:
        raise RampError(f"{url}/metrics is not Prometheus text: {exc}") from None


async def _first_scrape(client, url: str, parse_gauges: Callable[[str], ServerGauges]) -> ServerGauges:
    """The page the ramp starts from; a server without one is told in one line."""
    import httpx

    try:
        return await _scrape(client, url, parse_gauges)
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
            return await _first_scrape(client, url, parse_gauges)

    return asyncio.run(once())


def _cache_int(cache: dict[str, str], key: str) -> int | None:
    """An integer label of vllm:cache_config_info; None when the server leaves it out or unset."""
    value = cache.get(key)
    return int(value) if value not in (None, "", "None") else None


@dataclass
class _Users:
    """The ramp's closed-loop users: each sends its next request as soon as its last one returned,
    and counts the answer on the level being measured when it arrives."""

    client: Any  # an httpx.AsyncClient
    spec: RampSpec
    make_body: Callable[[int], dict]
    level: LevelObservation | None = None
    completion_tokens: set[int] = field(default_factory=set)
    sent: Iterator[int] = field(default_factory=itertools.count)
    tasks: list[asyncio.Task] = field(default_factory=list)

    def _measuring(self) -> LevelObservation:
        """The level being measured when an answer arrives (users start once the first one is set)."""
        assert self.level is not None, "the ramp sets a level before it starts users"
        return self.level

    def grow_to(self, concurrency: int) -> None:
        # Users are only added, never restarted: a level starts with the previous one's requests in flight.
        self.tasks += [asyncio.create_task(self._user()) for _ in range(concurrency - len(self.tasks))]

    async def _user(self) -> None:
        import httpx

        while True:
            body = self.make_body(next(self.sent))
            try:
                resp = await self.client.post(self.spec.target + "/v1/completions", json=body)
                if resp.status_code == 200:
                    self._measuring().ok += 1
                    self.completion_tokens.add(int((resp.json().get("usage") or {}).get("completion_tokens", -1)))
                else:
                    self._measuring().errors += 1
                    self._measuring().error_text = f"HTTP {resp.status_code}: {resp.text[:120]}"
            except httpx.HTTPError as exc:
                self._measuring().errors += 1
                self._measuring().error_text = f"{type(exc).__name__}: {exc}"[:160]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()  # closing the connections aborts the requests server-side
        await asyncio.gather(*self.tasks, return_exceptions=True)


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
            m = await _scrape(client, spec.target, parse_gauges)
        except httpx.HTTPError as exc:
            level.errors += 1
            level.error_text = f"/metrics: {exc}"[:160]
            continue
        level.samples.append(Sample(time.time(), m.running, m.waiting, m.kv_usage, m.preemptions))
        level.preemptions = m.preemptions - last_preemptions


def _stop_reason(level: LevelObservation) -> str | None:
    """Why the ramp stops after this level, or None to go on to the next."""
    if level.errors and not level.ok:
        return f"every request failed at concurrency {level.concurrency}: {level.error_text}"
    if level.saturation():
        return f"saturated at concurrency {level.concurrency}: " + "; ".join(level.saturation())
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
        first = await _first_scrape(client, spec.target, parse_gauges)
        num_blocks = _cache_int(first.cache_config, "num_gpu_blocks")
        block_size = _cache_int(first.cache_config, "block_size")
        users = _Users(client, spec, make_body)
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
                reason = _stop_reason(level)
                if reason:
                    stop_reason = reason
                    break
        finally:
            await users.stop()
    return RampResult(spec, num_blocks, block_size, levels, stop_reason, users.completion_tokens, first.engine)
