"""Workloads: deterministic, endless streams of RequestSpecs.

`spec(i)` depends only on the options and i, so the same seed gives the same requests in any
process and in any order: locust workers each take their own slice of indices (k, k+N, ...)
without talking to each other, and two runs of a sweep send the same prompts.

Kinds:
  random         prompts of the requested length, lengths spread uniformly around the target
  sharegpt       text prompts from a ShareGPT JSON/JSONL file (the first human turn)
  shared_prefix  N prefixes x M suffixes (prefix-cache workloads)
  mixed          a fraction of long prompts among short ones (head-of-line blocking)
  trace          a Mooncake JSONL or Azure CSV trace, sent at its own times (loadgen.trace_workload)
  sessions       multi-turn chat conversations that resend their history (loadgen.sessions_workload)

Prompt formats (random, shared_prefix, mixed): `text` (the default; any OpenAI-compatible server
takes it), sized by loadgen.prompt_text's TextSizer, or `ids`, token ids drawn from
[first_token_id, vocab_size) of the target's tokenizer (vLLM, SGLang and refengine take them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.prompt_text import TextSizer, estimated_sizer, text_of_words
from loadgen.request_spec import RequestSpec, Workload
from loadgen.sessions_workload import sessions_specs
from loadgen.sharegpt import load_sharegpt, tokenizer_length_fn
from loadgen.trace_workload import trace_specs
from rundir.record_json import plain
from rundir.workload_spec import PROMPT_FORMATS, WORKLOAD_KINDS, WorkloadSpec

KINDS = WORKLOAD_KINDS
__all__ = [
    "KINDS",
    "RequestSpec",
    "Workload",
    "WorkloadError",
    "WorkloadOptions",
    "level_workload_factory",
    "make_workload",
]


@dataclass(frozen=True)
class WorkloadOptions(WorkloadSpec):
    """Everything needed to rebuild a workload anywhere (to_dict is plain JSON, for the locust
    workers): run.json's workload (rundir.WorkloadSpec, where the options and their defaults live)
    and a level's lengths and seed."""

    input_len: int = 512
    output_len: int = 128
    seed: int = 0

    @classmethod
    def of(cls, spec: WorkloadSpec, **level: Any) -> "WorkloadOptions":
        """`spec` with a level's own options (input_len, output_len, seed, a trace's speed)."""
        return cls(**{**spec.options(), **level})

    def to_dict(self) -> dict[str, Any]:
        return plain(self.options())


def make_workload(options: WorkloadOptions | dict, length_fn: Callable[[str], int] | None = None) -> Workload:
    """Build a workload from options (a WorkloadOptions or its to_dict). `length_fn` (text -> token count)
    overrides options.tokenizer for sharegpt; it cannot travel to another process, options can."""
    o = WorkloadOptions(**options) if isinstance(options, dict) else options
    _check(o)
    prompts = _Prompts(o)
    if o.kind == "random":
        return Workload(o, lambda i: _random_spec(o, prompts, i), o.num_prompts)
    if o.kind == "shared_prefix":
        return _shared_prefix(o, prompts)
    if o.kind == "mixed":
        return Workload(o, lambda i: _mixed_spec(o, prompts, i), o.num_prompts)
    if o.kind == "trace":
        return trace_specs(o)
    if o.kind == "sessions":
        return sessions_specs(o)
    return _sharegpt(o, length_fn)


def level_workload_factory(**options: Any) -> Callable[[Any], Workload]:
    """A run_level workload_factory: these options, with input_len, output_len and seed from the level
    (and a trace's speed, where the level sets one)."""

    def factory(level) -> Workload:
        own = {"input_len": level.input_len, "output_len": level.output_len, "seed": level.seed}
        if level.trace_speed is not None:
            own["trace_speed"] = level.trace_speed
        return make_workload(WorkloadOptions(**{**options, **own}))

    return factory


# ----- generators -----------------------------------------------------------------------------


def _rng(o: WorkloadOptions, i: int, stream: int = 0) -> np.random.Generator:
    # SeedSequence of plain ints: the same stream in every process (unlike hash()).
    return np.random.default_rng([o.seed & 0xFFFFFFFF, stream, i])


def _spread(rng: np.random.Generator, length: int, spread: float) -> int:
    if spread <= 0:
        return length
    lo, hi = max(1, math.floor(length * (1 - spread))), max(1, math.ceil(length * (1 + spread)))
    return int(rng.integers(lo, hi + 1))


def _tokens(rng: np.random.Generator, o: WorkloadOptions, n: int) -> list[int]:
    return rng.integers(o.first_token_id, o.vocab_size, n).tolist()


class _Prompts:
    """Prompts of n tokens in the workload's format; text ones also say their exact count when known."""

    def __init__(self, o: WorkloadOptions):
        self.o = o
        self.sizer = TextSizer.of(o.text_sizer) if o.text_sizer else estimated_sizer()

    def words_for(self, n_tokens: int, with_overhead: bool = True) -> int:
        if with_overhead:
            return self.sizer.words_for(n_tokens)
        return max(1, int(round(n_tokens / self.sizer.tokens_per_word)))

    def make(self, rng: np.random.Generator, n_tokens: int) -> tuple[list[int] | str, int | None]:
        if self.o.prompt_format == "ids":
            return _tokens(rng, self.o, n_tokens), n_tokens
        n_words = self.words_for(n_tokens)
        return text_of_words(self.sizer, n_words, rng), self.count(n_words)

    def count(self, n_words: int) -> int | None:
        return int(round(self.sizer.expected_tokens(n_words))) if self.sizer.exact else None


def _spec(prompts: _Prompts, rng: np.random.Generator, n_in: int, n_out: int) -> RequestSpec:
    prompt, count = prompts.make(rng, n_in)
    return RequestSpec(prompt, n_in, n_out, n_out, dict(prompts.o.extra_body), client_prompt_tokens=count)


def _random_spec(o: WorkloadOptions, prompts: _Prompts, i: int) -> RequestSpec:
    rng = _rng(o, i)
    n_in, n_out = _spread(rng, o.input_len, o.input_len_spread), _spread(rng, o.output_len, o.output_len_spread)
    return _spec(prompts, rng, n_in, n_out)


def _mixed_spec(o: WorkloadOptions, prompts: _Prompts, i: int) -> RequestSpec:
    rng = _rng(o, i)
    long = bool(rng.random() < o.long_fraction)
    base = o.long_len if long else (o.short_len or o.input_len)
    n_in, n_out = _spread(rng, base, o.input_len_spread), _spread(rng, o.output_len, o.output_len_spread)
    return _spec(prompts, rng, n_in, n_out)


def _shared_prefix(o: WorkloadOptions, prompts: _Prompts) -> Workload:
    suffix_len = o.suffix_len if o.suffix_len is not None else o.input_len - o.prefix_len
    if suffix_len < 1:
        raise WorkloadError(
            f"shared_prefix needs suffix_len >= 1 (input_len {o.input_len} - prefix_len {o.prefix_len})"
        )
    text = o.prompt_format == "text"
    # Text: the prefix carries the server's constant (BOS, template), the suffix is words only.
    n_prefix_words, n_suffix_words = prompts.words_for(o.prefix_len), prompts.words_for(suffix_len, False)
    # One of the two, by prompt format (each prefix from its own generator: the same in either list).
    text_prefixes = (
        [text_of_words(prompts.sizer, n_prefix_words, _rng(o, p, stream=1)) for p in range(o.num_prefixes)]
        if text
        else []
    )
    id_prefixes = [] if text else [_tokens(_rng(o, p, stream=1), o, o.prefix_len) for p in range(o.num_prefixes)]
    count = prompts.count(n_prefix_words + n_suffix_words) if text else None
    n_groups = o.num_prefixes * o.suffixes_per_prefix

    def make(i: int) -> RequestSpec:
        # Interleave prefixes (request i uses prefix i mod N) so that every prefix stays warm in turn;
        # suffix j of prefix p is the same tokens every time it comes round.
        p, j = i % o.num_prefixes, (i // o.num_prefixes) % o.suffixes_per_prefix
        rng = _rng(o, p * o.suffixes_per_prefix + j, stream=2)
        n_out = _spread(_rng(o, i, stream=3), o.output_len, o.output_len_spread)
        if text:
            return RequestSpec(
                text_prefixes[p] + text_of_words(prompts.sizer, n_suffix_words, rng),
                o.prefix_len + suffix_len,
                n_out,
                n_out,
                dict(o.extra_body),
                client_prompt_tokens=count,
            )
        prompt = id_prefixes[p] + _tokens(rng, o, suffix_len)
        return RequestSpec(prompt, len(prompt), n_out, n_out, dict(o.extra_body), client_prompt_tokens=len(prompt))

    return Workload(o, make, o.num_prompts or n_groups)


def _sharegpt(o: WorkloadOptions, length_fn: Callable[[str], int] | None) -> Workload:
    if not o.dataset_path:
        raise WorkloadError("the sharegpt workload needs dataset_path (a ShareGPT .json or .jsonl file)")
    explicit_fn = length_fn
    if length_fn is None and o.tokenizer:
        length_fn = tokenizer_length_fn(o.tokenizer)
    convs = load_sharegpt(o.dataset_path)
    order = np.random.default_rng([o.seed & 0xFFFFFFFF, 4]).permutation(len(convs))
    if o.num_prompts:
        order = order[: o.num_prompts]
    specs = []
    for k in order.tolist():
        prompt, reply = convs[k]
        n_in = length_fn(prompt) if length_fn else 0
        n_out = length_fn(reply) if (length_fn and reply) else o.output_len
        n_out = max(1, n_out)
        specs.append(RequestSpec(prompt, n_in, n_out, n_out, dict(o.extra_body)))
    # A length function passed in (not options.tokenizer) cannot travel to another process.
    return Workload(o, lambda i: specs[i], len(specs), rebuildable=explicit_fn is None)


def _check(o: WorkloadOptions) -> None:
    if o.kind not in KINDS:
        raise WorkloadError(f"workload kind must be one of {', '.join(KINDS)}, got {o.kind!r}")
    if o.prompt_format not in PROMPT_FORMATS:
        raise WorkloadError(f"prompt format must be one of {', '.join(PROMPT_FORMATS)}, got {o.prompt_format!r}")
    for name in ("input_len", "output_len", "prefix_len", "long_len", "num_prefixes", "suffixes_per_prefix"):
        if getattr(o, name) < 1:
            raise WorkloadError(f"{name} must be >= 1, got {getattr(o, name)}")
    for name in ("input_len_spread", "output_len_spread"):
        if not 0 <= getattr(o, name) < 1:
            raise WorkloadError(f"{name} must be in [0, 1), got {getattr(o, name)}")
    if not 0 <= o.long_fraction <= 1:
        raise WorkloadError(f"long_fraction must be in [0, 1], got {o.long_fraction}")
    if not 0 <= o.first_token_id < o.vocab_size:
        raise WorkloadError(f"need 0 <= first_token_id < vocab_size, got {o.first_token_id}, {o.vocab_size}")
    if o.num_prompts is not None and o.num_prompts < 1:
        raise WorkloadError(f"num_prompts must be >= 1 or None, got {o.num_prompts}")
