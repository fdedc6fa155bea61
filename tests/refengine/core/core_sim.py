"""Helpers for the core tests: requests, a scheduler on a fake clock and a simulated model runner.

The model runner is simulated, as in vLLM's scheduler tests: every ScheduledRequest with
sample=True gets one token back. Every helper step checks the invariants the scheduler promises.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from refengine.config import CacheConfig, SchedulerConfig
from refengine.core.outputs import ModelRunnerOutput, SchedulerOutput
from refengine.core.scheduler import Scheduler
from refengine.request import Request
from refengine.sampling_params import SamplingParams


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


_SCHED_FIELDS = {f.name for f in fields(SchedulerConfig)}
_CACHE_FIELDS = {f.name for f in fields(CacheConfig)}


def make_scheduler(clock: FakeClock | None = None, **kwargs) -> Scheduler:
    """Small defaults (block_size 4, 64 blocks, budget 64, max_model_len 64, no watermark)."""
    defaults = dict(
        block_size=4, num_blocks=64, max_num_batched_tokens=64, max_model_len=64, max_num_seqs=16, watermark=0.0
    )
    defaults.update(kwargs)
    unknown = set(defaults) - _SCHED_FIELDS - _CACHE_FIELDS
    assert not unknown, unknown
    sched_cfg = SchedulerConfig(**{k: v for k, v in defaults.items() if k in _SCHED_FIELDS})
    cache_cfg = CacheConfig(**{k: v for k, v in defaults.items() if k in _CACHE_FIELDS})
    return Scheduler(sched_cfg, cache_cfg, clock=clock or FakeClock())


def make_request(
    req_id: str,
    prompt: int | list[int],
    max_tokens: int | None = 4,
    *,
    arrival: float = 0.0,
    priority: int = 0,
    eos_token_id: int | None = None,
    start: int = 100,
    **sampling,
) -> Request:
    """A request whose prompt is `prompt` (a list) or `prompt` distinct tokens starting at `start`."""
    tokens = list(prompt) if isinstance(prompt, list) else list(range(start, start + prompt))
    params = SamplingParams(max_tokens=max_tokens, **sampling)
    return Request(req_id, tokens, params, eos_token_id=eos_token_id, arrival_time=arrival, priority=priority)


def check_output(scheduler: Scheduler, out: SchedulerOutput) -> None:
    """What must hold for every SchedulerOutput."""
    cfg = scheduler.config
    assert out.total_num_scheduled_tokens <= cfg.max_num_batched_tokens
    assert len(out.requests) <= cfg.max_num_seqs
    assert len({r.req_id for r in out.requests}) == len(out.requests)
    assert scheduler.num_running <= cfg.max_num_seqs
    bs = scheduler.cache_config.block_size
    for sr in out.requests:
        req = scheduler.get_request(sr.req_id)
        assert req is not None and sr.num_tokens > 0
        assert sr.token_ids == req.all_token_ids[sr.start_pos : sr.end_pos]
        assert sr.sample == (sr.end_pos == req.num_tokens)
        assert len(sr.block_ids) * bs >= sr.end_pos, "block table too short for the scheduled tokens"
        assert sr.block_ids == scheduler.kv_cache_manager.get_block_ids(req)
        if not cfg.enable_chunked_prefill:
            assert sr.sample, "with chunked prefill off every request is scheduled to its last token"
    scheduler.kv_cache_manager.check_integrity()


def runner_output(out: SchedulerOutput, token: int | dict[str, int] = 7) -> ModelRunnerOutput:
    """One token per request that samples this step."""
    sampled = {}
    for sr in out.requests:
        if sr.sample:
            sampled[sr.req_id] = token[sr.req_id] if isinstance(token, dict) else token
    return ModelRunnerOutput(sampled_token_ids=sampled)


def step(scheduler: Scheduler, token: int | dict[str, int] = 7, clock: FakeClock | None = None, dt: float = 0.0):
    """schedule -> simulated runner -> update, checking invariants after each call."""
    out = scheduler.schedule()
    check_output(scheduler, out)
    results = scheduler.update_from_output(out, runner_output(out, token))
    scheduler.kv_cache_manager.check_integrity()
    if clock is not None:
        clock.advance(dt)
    return out, results


def run_to_completion(scheduler: Scheduler, max_steps: int = 10_000, token: int = 7) -> list[SchedulerOutput]:
    outs = []
    while scheduler.has_unfinished_requests():
        assert len(outs) < max_steps, "scheduler made no progress"
        out, _ = step(scheduler, token)
        outs.append(out)
    return outs


def assert_all_blocks_free(scheduler: Scheduler) -> None:
    counts = scheduler.kv_cache_manager.check_integrity()
    assert counts["used"] == 0
    assert counts["free"] + counts["cached"] == scheduler.cache_config.num_blocks
    assert scheduler.kv_cache_manager.get_num_free_blocks() == scheduler.cache_config.num_blocks
