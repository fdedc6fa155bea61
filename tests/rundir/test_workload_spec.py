"""run.json's `sweep.workload` as a typed record (rundir.WorkloadSpec): the keys each version of
the tool wrote read into typed fields and write back as they were, unknown keys included."""

from __future__ import annotations

import json

import pytest

from rundir import RunInfo, SweepInfo, WorkloadSpec

SIZER = {
    "words": ["a", "b"],
    "tokens_per_word": 1.0,
    "overhead_tokens": 1.0,
    "source": "tokenizer",
    "exact": True,
    "extra": {"check": {"requested": 64, "counted": 64, "relative_error": 0.0}},
}
# sweep.workload as earlier versions wrote it (git log -p llmbench/sweep/setup.py), in their key order.
OLD_WORKLOADS = {
    # before --prompt-format and text prompts: token ids, the vocabulary from the tokenizer
    "ids, before prompt formats": {
        "kind": "mixed",
        "input_len_spread": 0.1,
        "dataset_path": None,
        "long_len": 2048,
        "long_fraction": 0.2,
        "vocab_size": 4096,
        "tokenizer": "/m/tokenizer.json",
    },
    # a trace recorded before traces played once by default: no trace_loop (it cycled)
    "trace, before play-once": {
        "kind": "trace",
        "prompt_format": "text",
        "input_len_spread": 0.0,
        "dataset_path": "/d/t.jsonl",
        "long_len": 4096,
        "long_fraction": 0.1,
        "trace_speed": 2.0,
        "trace_limit": None,
        "block_size": 512,
        "text_sizer": SIZER,
    },
    "sessions": {
        "kind": "sessions",
        "prompt_format": "text",
        "input_len_spread": 0.0,
        "dataset_path": None,
        "long_len": 4096,
        "long_fraction": 0.1,
        "turns": 3,
        "text_sizer": SIZER,
    },
    "llmdiag probe": {"kind": "random"},
    "planned shared prefixes": {
        "kind": "shared_prefix",
        "prompt_format": "ids",
        "vocab_size": 4096,
        "num_prefixes": 2,
        "prefix_len": 448,
        "suffixes_per_prefix": 4,
    },
}


def _run_json(workload: dict | None) -> dict:
    sweep = {"concurrency": [1]} if workload is None else {"concurrency": [1], "workload": workload}
    return {"run_id": "r", "command": [], "host": {}, "target": {"url": None, "model": None}, "sweep": sweep}


@pytest.mark.parametrize("name", sorted(OLD_WORKLOADS))
def test_an_older_versions_workload_reads_typed_and_writes_back_byte_for_byte(name):
    old = OLD_WORKLOADS[name]
    info = RunInfo.from_dict(json.loads(json.dumps(_run_json(old))))
    spec = info.sweep.workload
    assert isinstance(spec, WorkloadSpec) and spec.kind == old["kind"] and spec.extra == {}
    assert all(getattr(spec, k) == v for k, v in old.items())
    assert json.dumps(info.to_dict()["sweep"]["workload"]) == json.dumps(old)
    assert RunInfo.from_dict(info.to_dict()).sweep.workload.to_dict() == old


def test_typed_fields_read_with_their_defaults_where_a_key_is_absent():
    spec = RunInfo.from_dict(_run_json(OLD_WORKLOADS["trace, before play-once"])).sweep.workload
    assert spec.trace_speed == 2.0 and spec.block_size == 512 and spec.text_sizer == SIZER
    assert spec.trace_loop is None and "trace_loop" not in spec.recorded  # absent, not null: it cycled
    assert spec.vocab_size == 32_000 and spec.turns == 4  # absent: the defaults
    assert RunInfo.from_dict(_run_json(None)).sweep.workload.to_dict() == {"kind": "random"}


def test_unknown_keys_and_kinds_round_trip():
    # the very first version's key for the dataset, and a newer tool's kind, format and option
    newer = {
        "kind": "audio_chat",
        "dataset": None,
        "prompt_format": "audio",
        "input_len_spread": 0.5,
        "new_knob": {"x": [1, 2]},
        "recorded": "not ours",
    }
    info = RunInfo.from_dict(_run_json(newer))
    spec = info.sweep.workload
    assert (spec.kind, spec.prompt_format, spec.input_len_spread) == ("audio_chat", "audio", 0.5)
    assert spec.extra == {"dataset": None, "new_knob": {"x": [1, 2]}, "recorded": "not ours"}
    again = RunInfo.from_dict(json.loads(json.dumps(info.to_dict()))).sweep.workload
    assert again == spec and again.to_dict() == newer and again.extra == spec.extra


def test_a_new_spec_writes_its_kind_the_fields_off_their_defaults_and_those_set_with_updated():
    assert WorkloadSpec().to_dict() == {"kind": "random"} and SweepInfo().to_dict()["workload"] == {"kind": "random"}
    spec = WorkloadSpec(kind="mixed", long_len=2048)
    assert spec.to_dict() == {"kind": "mixed", "long_len": 2048}
    # a default set with updated is written (the sweep's null dataset_path), in field order
    spec = spec.updated(trace_limit=None, dataset_path=None).updated(prompt_format="text")
    assert list(spec.to_dict()) == ["kind", "prompt_format", "dataset_path", "long_len", "trace_limit"]
    assert spec.to_dict()["dataset_path"] is None and spec == WorkloadSpec(kind="mixed", long_len=2048)


def test_a_garbled_workload_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="kind"):
        RunInfo.from_dict(_run_json({"kind": 3}))
    with pytest.raises(TypeError, match="workload is an object"):
        RunInfo.from_dict(_run_json(["random"]))
    with pytest.raises(TypeError, match="text_sizer"):
        WorkloadSpec(text_sizer="words")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="WorkloadSpec"):
        SweepInfo(workload={"kind": "random"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="recorded"):
        WorkloadSpec(recorded=frozenset({"input_len"}))
