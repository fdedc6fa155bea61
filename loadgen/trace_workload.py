"""The `trace` workload: a Trace (loadgen.trace) as RequestSpecs with their send times.

Each RequestSpec carries `arrival_s`, its offset from the level's start; the open-loop pacer
sends it then instead of drawing a gap (loadgen.locust_users). See loadgen/trace.py for the
formats and how hash blocks become identical text prefixes.
"""

from __future__ import annotations

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.prompt_text import TextSizer, estimated_sizer, text_of_words
from loadgen.request_spec import RequestSpec, Workload
from loadgen.trace import Trace, TraceRow, block_rng, load_trace
from rundir.trace_replay import TRACE_LOOP_REASONS, TraceReplay
from rundir.workload_spec import WorkloadSpec


def trace_specs(o, trace: Trace | None = None):
    """A Workload (loadgen.workloads) replaying o.dataset_path with o.trace_speed, o.trace_limit, o.block_size."""
    if not o.dataset_path:
        raise WorkloadError("the trace workload needs dataset_path (a Mooncake .jsonl or Azure .csv trace)")
    if not o.trace_speed > 0 or o.block_size < 1:
        raise WorkloadError("trace_speed must be > 0 and block_size >= 1")
    if o.trace_loop is not None and o.trace_loop not in TRACE_LOOP_REASONS:
        raise WorkloadError(f"trace_loop must be one of {TRACE_LOOP_REASONS} or None, got {o.trace_loop!r}")
    trace = trace or load_trace(o.dataset_path, o.trace_limit)
    sizer = TextSizer.of(o.text_sizer) if o.text_sizer else estimated_sizer()
    rows, span = trace.rows, trace.span_s

    def make(i: int) -> RequestSpec:
        cycle, row = divmod(i, len(rows))
        r = rows[row]
        prompt: list[int] | str
        count: int | None
        if o.prompt_format == "ids":
            prompt = _ids(o, r, i, cycle)
            count = len(prompt)
        else:
            prompt, count = _text(o, sizer, r, i, cycle)
        return RequestSpec(
            prompt,
            r.input_len,
            r.output_len,
            r.output_len,
            dict(o.extra_body),
            client_prompt_tokens=count,
            arrival_s=(cycle * span + r.t_s) / o.trace_speed,
        )

    # Played once unless told to cycle (docs/workloads.md, "Replay"): the stream ends with the trace.
    return Workload(o, make, None, length=None if o.trace_loop else len(rows))


def trace_replay(workload: WorkloadSpec, level, sent: int | None = None) -> TraceReplay:
    """What a level (a loadgen.specs.LevelSpec) replays of the trace its workload names: once, its
    first part, or cycled, and why (the record run.json keeps per level)."""
    if not workload.dataset_path:
        raise WorkloadError("the trace workload needs dataset_path (a Mooncake .jsonl or Azure .csv trace)")
    trace = load_trace(workload.dataset_path, workload.trace_limit)
    speed = level.trace_speed if level.trace_speed is not None else workload.trace_speed
    return TraceReplay(
        requests=len(trace.rows),
        span_s=trace.span_s,
        speed=speed,
        level_s=level.warmup_s + level.duration_s,
        cycled_by=workload.trace_loop,
        sent=sent,
    )


def _blocks(o, r: TraceRow) -> list[tuple[int | None, int]]:
    """(hash id, tokens) per block; rows without hash ids are one block of their own (None)."""
    if not r.hash_ids:
        return [(None, r.input_len)]
    full = [(h, o.block_size) for h in r.hash_ids[:-1]]
    last = max(1, r.input_len - o.block_size * len(full))
    return full + [(r.hash_ids[-1], last)]


def _text(o, sizer: TextSizer, r: TraceRow, i: int, cycle: int) -> tuple[str, int | None]:
    blocks = _blocks(o, r)
    parts, n_words = [], 0
    for k, (h, n_tokens) in enumerate(blocks):
        tokens = n_tokens - (sizer.overhead_tokens if k == len(blocks) - 1 else 0)
        words = max(1, int(round(tokens / sizer.tokens_per_word)))
        rng = block_rng(o.seed, h, cycle) if h is not None else np.random.default_rng([o.seed & 0xFFFFFFFF, 8, i])
        parts.append(text_of_words(sizer, words, rng))
        n_words += words
    count = int(round(sizer.expected_tokens(n_words))) if sizer.exact else None
    return "".join(parts), count


def _ids(o, r: TraceRow, i: int, cycle: int) -> list[int]:
    out: list[int] = []
    for h, n in _blocks(o, r):
        rng = block_rng(o.seed, h, cycle) if h is not None else np.random.default_rng([o.seed & 0xFFFFFFFF, 8, i])
        out += rng.integers(o.first_token_id, o.vocab_size, n).tolist()
    return out
