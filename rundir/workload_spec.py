"""WorkloadSpec: the sweep's workload as run.json records it (`sweep.workload`, docs/run-format.md).

The workload's options without the lengths and the seed, which each level sets:
loadgen.workloads.WorkloadOptions is this record plus those three, so the defaults live here once.
Keys this version does not know are kept in `extra` and written back (rundir/record_json.py).

A record writes back the keys it was given, no more: the sweep writes a kind's own keys (a null
`dataset_path`, a trace's null `trace_loop`), `llmdiag probe` the kind alone, and an older tool
fewer keys than this one. So `recorded` names the fields run.json holds: `kind`, each field off
its default, and each field read from run.json or set with `updated` even at its default. The
same sweep thus writes the same run.json, and a run.json reads and writes back unchanged (an
absent key stays absent: llmbench/sweep/setup/resume.py reads a trace without `trace_loop` as one
recorded before traces played once).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rundir.record_json import EXTRA, plain, split_known

WORKLOAD_KINDS = ("random", "sharegpt", "shared_prefix", "mixed", "trace", "sessions")
PROMPT_FORMATS = ("text", "ids")
RECORDED = "recorded"  # the field that says which fields run.json holds (never a key itself)


@dataclass(frozen=True)
class WorkloadSpec:
    """What builds the sweep's requests (docs/workloads.md). Fields in the order the sweep writes
    them, so that run.json's keys keep their order; the kind's own fields are marked."""

    kind: str = "random"  # WORKLOAD_KINDS
    prompt_format: str = "text"  # text | ids (random, shared_prefix, mixed, trace)
    input_len_spread: float = 0.0  # lengths uniform in [len*(1-s), len*(1+s)]
    dataset_path: str | None = None  # sharegpt: the ShareGPT file; trace: the trace
    long_len: int = 4096  # mixed: the long prompts' length
    long_fraction: float = 0.1  # mixed: their share
    vocab_size: int = 32_000  # token ids are drawn from [first_token_id, vocab_size)
    tokenizer: str | None = None  # the target's tokenizer.json: exact text sizing, sharegpt's counts
    turns: int = 4  # sessions: turns per conversation
    trace_speed: float = 1.0  # trace: time scale (2 = the trace's requests twice as fast)
    trace_limit: int | None = None  # trace: the first N requests
    block_size: int = 512  # trace: prompt tokens per hash id (Mooncake: 512)
    # trace: why it cycles to fill the level (rundir.trace_replay.TRACE_LOOP_REASONS); None plays it once
    trace_loop: str | None = None
    # How text prompts are sized: a loadgen.prompt_text.TextSizer's dict, its calibration typed in
    # rundir/text_calibration.py (None: the built-in estimate). Set once the preflight has settled it.
    text_sizer: dict[str, Any] | None = None
    # Never written by the sweep, honoured when a run.json holds them (a planned or hand-made run).
    output_len_spread: float = 0.0
    first_token_id: int = 16  # the first ids are usually special (bos, eos, pad, unk, ...)
    num_prompts: int | None = None  # cycle after this many distinct requests (None: never repeat, except sharegpt)
    num_prefixes: int = 4  # shared_prefix
    prefix_len: int = 256
    suffix_len: int | None = None  # None: input_len - prefix_len
    suffixes_per_prefix: int = 8
    short_len: int | None = None  # mixed: None: input_len
    num_sessions: int = 16  # sessions: conversations open at once (interleaved)
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    extra: dict[str, Any] = field(default_factory=dict)
    recorded: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        # Only what any run.json's workload satisfies: a kind or format this version does not know
        # (a newer tool's) still reads; loadgen.workloads refuses it where requests are built.
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"a workload's kind is a name, got {self.kind!r}")
        if not isinstance(self.prompt_format, str):
            raise ValueError(f"a workload's prompt_format is a name, got {self.prompt_format!r}")
        if self.text_sizer is not None and not isinstance(self.text_sizer, dict):
            raise TypeError(f"a workload's text_sizer is an object or null, got {type(self.text_sizer).__name__}")
        if not isinstance(self.extra_body, dict) or not isinstance(self.extra, dict):
            raise TypeError("a workload's extra_body and extra are objects")
        names = _json_names(type(self))
        if not set(self.recorded) <= names:
            raise ValueError(f"recorded names fields of the workload, got {sorted(set(self.recorded) - names)}")
        off_default = {
            f.name for f in dataclasses.fields(self) if f.name in names and getattr(self, f.name) != _default(f)
        }
        object.__setattr__(self, RECORDED, frozenset(self.recorded) | off_default | {"kind"})

    def updated(self, **changes: Any) -> "WorkloadSpec":
        """This spec with `changes`, each written to run.json even when it equals its default."""
        return dataclasses.replace(self, **changes, recorded=self.recorded | changes.keys())

    def options(self) -> dict[str, Any]:
        """Every field's value by name, `extra` included: what loadgen's WorkloadOptions takes."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != RECORDED}

    def to_dict(self) -> dict[str, Any]:
        """run.json's object: the recorded fields, in field order, after the keys kept in `extra`."""
        return {
            **plain(self.extra),
            **{f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name in self.recorded},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "WorkloadSpec":
        """From run.json's `sweep.workload`: its known keys recorded, the others kept in `extra`."""
        if d is not None and not isinstance(d, dict):
            raise TypeError(f"a sweep's workload is an object, got {type(d).__name__}")
        known, unknown = split_known(cls, d or {})
        if RECORDED in known:  # not ours to read: a key of another tool's
            unknown[RECORDED] = known.pop(RECORDED)
        return cls(**known, extra=unknown, recorded=frozenset(known))


def _json_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - {EXTRA, RECORDED}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default
