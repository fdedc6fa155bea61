"""`llmdiag oom --ramp`: the KV ramp against a live server, with the sweep's own request building.

Before the ramp: the model from /v1/models, the target's own limits (max_model_len from
/v1/models, KV blocks and block size from `vllm:cache_config_info`), the preflight and the
calibration of text prompts (llmbench.sweep.target), so the ramp's requests are ones this server
takes, of a length it can hold, counted the way it counts.
"""

from __future__ import annotations

import asyncio

import numpy as np
from rich.console import Console
from rich.text import Text

from analyzers.diagnosis_error import DiagnosisError
from llmbench.sweep.target import settle_requests
from llmbench.sweep.target_facts import engine_facts, server_gauges
from loadgen.kv_ramp.gauges import check_metrics
from loadgen.kv_ramp.loop import run_ramp
from loadgen.kv_ramp.result import RampResult
from loadgen.kv_ramp.spec import RampError, RampSpec
from loadgen.openai_body import request_dict
from loadgen.prompt_text import text_of_words
from loadgen.specs import TargetSpec
from loadgen.target_probe import TargetClient, TargetError
from loadgen.workloads import RequestSpec
from reports.grid import Column, Grid, print_grid
from rundir import WorkloadSpec
from rundir.kv_cache import KVCacheSize


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise DiagnosisError(f"--ramp-levels must be comma-separated integers, got {text!r}") from None


def _fit_prompt(prompt_tokens: int, max_tokens: int, max_model_len: int | None, console: Console) -> int:
    """The requested prompt, shortened to what the server's max_model_len holds with the output."""
    if max_model_len is None or prompt_tokens + max_tokens <= max_model_len:
        return prompt_tokens
    fitted = max(1, max_model_len - max_tokens - 1)
    console.print(
        f"[yellow]the server's max_model_len is {max_model_len}: ramp prompts of {fitted} tokens, "
        f"not {prompt_tokens}[/]"
    )
    return fitted


def ramp_mode(
    console: Console,
    target: str,
    prompt_tokens: int,
    max_tokens: int,
    levels_text: str,
    level_seconds: float,
    served_model: str | None,
    api_key: str | None,
    estimate,
) -> RampResult:
    levels = _levels(levels_text)
    tspec = TargetSpec(url=target.rstrip("/"), model=served_model or "", api_key=api_key)
    try:
        with TargetClient(tspec) as client:
            if not tspec.model:
                tspec.model = client.resolve_model()
            prompt_tokens = _fit_prompt(prompt_tokens, max_tokens, client.max_model_len(), console)
            check_metrics(tspec.url, server_gauges, api_key)  # before the preflight spends a request
            settled = settle_requests(
                client, WorkloadSpec(kind="random", prompt_format="text"), prompt_tokens, max_tokens, 0, False, console
            )
    except (TargetError, RampError) as exc:
        raise DiagnosisError(str(exc)) from None
    sizer, settled_target = settled.sizer, settled.target
    assert sizer is not None
    n_words = sizer.words_for(prompt_tokens)

    def make_body(i: int) -> dict:
        prompt = text_of_words(sizer, n_words, np.random.default_rng([7, i]))
        return request_dict(RequestSpec(prompt, prompt_tokens, max_tokens, max_tokens), settled_target, stream=False)

    try:
        spec = RampSpec(
            target=tspec.url,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            levels=levels,
            level_seconds=level_seconds,
            model=tspec.model,
            api_key=api_key,
        )
    except RampError as exc:
        raise DiagnosisError(str(exc)) from None
    published = engine_facts(tspec.url, api_key)
    facts = published.get("cache_config", {})
    cache = KVCacheSize.from_engine_facts(published)
    fits = cache.requests_that_fit(spec.request_tokens) if cache is not None and cache.usable_blocks else None
    if facts:
        console.print(
            f"the server's KV cache: {facts.get('num_gpu_blocks', '?')} blocks of "
            f"{facts.get('block_size', '?')} tokens ({facts.get('cache_dtype', 'dtype not published')})"
        )
    table = Grid(
        f"KV ramp against {spec.target} ({spec.request_tokens} tokens per request)",
        [
            Column(col, "right" if col != "saturated by" else "left")
            for col in (
                "concurrency",
                "ok",
                "errors",
                "max running",
                "held at",
                "max KV usage",
                "preemptions",
                "saturated by",
            )
        ],
    )

    def on_level(lv) -> None:
        kv = "n/a" if lv.max_kv_usage is None else f"{lv.max_kv_usage:.0%}"
        console.print(
            f"[dim]level {lv.concurrency}: {lv.ok} ok, {lv.errors} errors, running <= {lv.max_running}, KV {kv}[/]"
        )
        table.add_row(
            str(lv.concurrency),
            str(lv.ok),
            str(lv.errors),
            str(lv.max_running),
            str(lv.plateau_running or "-"),
            kv,
            f"{lv.preemptions:g}",
            "; ".join(lv.saturation(fits)),
        )

    try:
        result = asyncio.run(run_ramp(spec, server_gauges, make_body, on_level))
    except RampError as exc:
        raise DiagnosisError(str(exc)) from None
    print_grid(console, table)
    if result.all_failed:
        raise DiagnosisError(f"the ramp's requests were refused, so no capacity was measured: {result.stop_reason}")
    _print_outcome(console, result, spec, estimate)
    return result


def _print_outcome(console: Console, result: RampResult, spec: RampSpec, estimate) -> None:
    console.print(Text(result.stop_reason))
    est, block_size = result.estimate, result.block_size
    reserved = (result.num_blocks or 0) - (result.usable_blocks or 0)
    held_back = f", {reserved} reserved by {result.engine}" if reserved else ""
    if est is not None and block_size is not None:  # (an estimate implies a block size)
        est_text = (
            f"{est} (server: {result.num_blocks} blocks of {block_size}{held_back}; "
            f"{-(-spec.request_tokens // block_size)} blocks per request)"
        )
    else:
        est_text = "n/a (the server exposes no vllm:cache_config_info)"
    observed = "not reached" if result.observed_capacity is None else result.observed_capacity
    console.print(f"observed KV capacity: {observed} concurrent requests; estimate {est_text}")
    if estimate is not None:
        console.print(
            f"memory model ({estimate.shape.name}, its own assumptions, not the server's): "
            f"{estimate.max_concurrency(spec.request_tokens)} requests of {spec.request_tokens} tokens"
        )
    if any(t != spec.max_tokens for t in result.completion_tokens_seen):
        console.print(
            Text(
                f"note: the server returned {sorted(result.completion_tokens_seen)} completion tokens, "
                f"not {spec.max_tokens}: it may not honour ignore_eos",
                style="yellow",
            )
        )
