"""Workloads: exact lengths, determinism by seed, ShareGPT parsing and its errors, shared prefixes."""

from __future__ import annotations

import json

import pytest

from loadgen import LevelSpec, WorkloadError, WorkloadOptions, level_workload_factory, make_workload
from loadgen.openai_body import request_body
from loadgen.specs import TargetSpec
from rundir import WorkloadSpec


def test_random_prompts_have_exact_lengths_and_avoid_special_ids():
    w = make_workload(WorkloadOptions(prompt_format="ids", input_len=300, output_len=40, vocab_size=1000, seed=3))
    for spec in w.take(20):
        assert len(spec.prompt) == spec.target_input_len == 300
        assert spec.max_tokens == spec.target_output_len == 40
        assert min(spec.prompt) >= 16 and max(spec.prompt) < 1000


def test_length_spread_stays_in_range_and_varies():
    w = make_workload(
        WorkloadOptions(prompt_format="ids", input_len=100, output_len=50, input_len_spread=0.2, output_len_spread=0.5)
    )
    specs = w.take(200)
    ins = [len(s.prompt) for s in specs]
    outs = [s.max_tokens for s in specs]
    assert all(len(s.prompt) == s.target_input_len for s in specs)
    assert min(ins) >= 80 and max(ins) <= 120 and len(set(ins)) > 10
    assert min(outs) >= 25 and max(outs) <= 75 and len(set(outs)) > 10


def test_deterministic_by_seed_in_any_order():
    a = make_workload(WorkloadOptions(prompt_format="ids", input_len=64, input_len_spread=0.5, seed=7))
    b = make_workload(WorkloadOptions(prompt_format="ids", input_len=64, input_len_spread=0.5, seed=7))
    c = make_workload(WorkloadOptions(prompt_format="ids", input_len=64, input_len_spread=0.5, seed=8))
    assert [s.prompt for s in a.take(10)] == [b.spec(i).prompt for i in reversed(range(10))][::-1]
    assert a.spec(5).prompt != c.spec(5).prompt
    assert a.spec(5).prompt != a.spec(6).prompt  # no repeats without num_prompts


def test_num_prompts_cycles():
    w = make_workload(WorkloadOptions(prompt_format="ids", input_len=8, num_prompts=3))
    assert w.period == 3
    assert [s.prompt for s in w.take(3)] == [s.prompt for s in w.take(3, start=3)]
    it = iter(w)
    assert [next(it).prompt for _ in range(4)][3] == w.spec(0).prompt


def test_shared_prefix_structure():
    o = WorkloadOptions(
        prompt_format="ids", kind="shared_prefix", num_prefixes=3, prefix_len=20, suffix_len=5, suffixes_per_prefix=4
    )
    w = make_workload(o)
    assert w.period == 12
    specs = w.take(12)
    prefixes = {tuple(s.prompt[:20]) for s in specs}
    assert len(prefixes) == 3
    assert all(len(s.prompt) == s.target_input_len == 25 for s in specs)
    assert len({tuple(s.prompt) for s in specs}) == 12  # every prefix x suffix once per period
    assert specs[0].prompt[:20] == specs[3].prompt[:20] != specs[1].prompt[:20]  # interleaved prefixes
    assert [s.prompt for s in w.take(12, start=12)] == [s.prompt for s in specs]


def test_shared_prefix_suffix_defaults_to_input_len_minus_prefix():
    w = make_workload(WorkloadOptions(prompt_format="ids", kind="shared_prefix", input_len=100, prefix_len=60))
    assert len(w.spec(0).prompt) == 100
    with pytest.raises(WorkloadError, match="suffix_len"):
        make_workload(WorkloadOptions(prompt_format="ids", kind="shared_prefix", input_len=50, prefix_len=60))


def test_mixed_long_short():
    w = make_workload(
        WorkloadOptions(prompt_format="ids", kind="mixed", long_fraction=0.25, long_len=1000, short_len=10, seed=1)
    )
    lens = [len(s.prompt) for s in w.take(400)]
    assert set(lens) == {10, 1000}
    assert 0.18 < lens.count(1000) / 400 < 0.32


def _write_sharegpt(path, entries, jsonl=False):
    with open(path, "w") as f:
        if jsonl:
            f.write("\n".join(json.dumps(e) for e in entries) + "\n")
        else:
            json.dump(entries, f)


SHAREGPT = [
    {"conversations": [{"from": "human", "value": "hello there"}, {"from": "gpt", "value": "a b c d e f"}]},
    {
        "conversations": [
            {"from": "system", "value": "be nice"},
            {"from": "human", "value": "second prompt"},
            {"from": "gpt", "value": "x y"},
        ]
    },
    {"conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
    {"conversations": [{"from": "human", "value": "no reply"}]},
]


@pytest.mark.parametrize("jsonl", [False, True])
def test_sharegpt_prompts_and_output_lengths(tmp_path, jsonl):
    path = tmp_path / ("d.jsonl" if jsonl else "d.json")
    _write_sharegpt(path, SHAREGPT, jsonl)
    words = lambda text: len(text.split())
    w = make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(path), output_len=33), length_fn=words)
    assert w.period == 3
    by_prompt = {s.prompt: s for s in w.take(3)}
    assert set(by_prompt) == {"hello there", "second prompt", "no reply"}
    assert by_prompt["hello there"].max_tokens == 6 and by_prompt["hello there"].target_input_len == 2
    assert by_prompt["second prompt"].max_tokens == 2
    assert by_prompt["no reply"].max_tokens == 33  # no gpt turn: the fixed output length
    # without a length function: fixed output length, input length unknown (0)
    w2 = make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(path), output_len=33))
    assert {s.max_tokens for s in w2.take(3)} == {33} and {s.target_input_len for s in w2.take(3)} == {0}


def test_sharegpt_errors(tmp_path):
    with pytest.raises(WorkloadError, match="not found"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(tmp_path / "missing.json")))
    with pytest.raises(WorkloadError, match="dataset_path"):
        make_workload(WorkloadOptions(kind="sharegpt"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"conversations": [}')
    with pytest.raises(WorkloadError, match="not valid JSON"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(bad)))
    bad.write_text('{"conversations": []}\nnot json at all\n')
    with pytest.raises(WorkloadError, match="line 2"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(bad)))
    bad.write_text('[{"messages": []}]')
    with pytest.raises(WorkloadError, match="no 'conversations' list"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(bad)))
    bad.write_text('[{"conversations": [{"from": "gpt", "value": "only"}]}]')
    with pytest.raises(WorkloadError, match="no conversation"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(bad)))
    bad.write_text("")
    with pytest.raises(WorkloadError, match="empty"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(bad)))


def test_bad_options_are_rejected():
    for kw in (
        {"kind": "nope"},
        {"input_len": 0},
        {"input_len_spread": 1.0},
        {"long_fraction": 2},
        {"first_token_id": 5, "vocab_size": 5},
        {"num_prompts": 0},
    ):
        with pytest.raises(WorkloadError):
            make_workload(WorkloadOptions(**kw))


def test_level_factory_takes_lengths_and_seed_from_the_level():
    factory = level_workload_factory(kind="random", prompt_format="ids", input_len_spread=0.0)
    w = factory(LevelSpec("l", concurrency=1, input_len=77, output_len=9, seed=4))
    assert len(w.spec(0).prompt) == 77 and w.spec(0).max_tokens == 9 and w.options.seed == 4
    assert make_workload(w.options.to_dict()).spec(3).prompt == w.spec(3).prompt  # rebuilt from its options


def test_run_jsons_workload_with_a_levels_lengths_and_seed_builds_the_requests():
    # a key of a newer tool is kept with the options (it travels to the workers) and changes nothing
    spec = WorkloadSpec.from_dict(
        {"kind": "random", "prompt_format": "ids", "vocab_size": 1000, "from_a_newer_tool": 1}
    )
    w = level_workload_factory(**spec.options())(LevelSpec("l", concurrency=1, input_len=5, output_len=2, seed=1))
    assert w.options.vocab_size == 1000 and w.options.extra == {"from_a_newer_tool": 1}
    plain = WorkloadOptions(prompt_format="ids", vocab_size=1000, input_len=5, output_len=2, seed=1)
    assert [w.spec(i).prompt for i in range(3)] == [make_workload(plain).spec(i).prompt for i in range(3)]
    config = json.loads(json.dumps(w.options.to_dict()))  # as the locust workers receive it
    assert make_workload(config).spec(2).prompt == w.spec(2).prompt
    assert WorkloadOptions.of(spec, input_len=5, output_len=2, seed=1) == w.options


def test_request_body():
    spec = make_workload(
        WorkloadOptions(prompt_format="ids", input_len=4, output_len=3, extra_body={"temperature": 0})
    ).spec(0)
    body = json.loads(request_body(spec, TargetSpec("http://h:1/v1/", "m")))
    assert body == {
        "model": "m",
        "prompt": spec.prompt,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "temperature": 0,
    }
    body = json.loads(request_body(spec, TargetSpec("http://h:1", "m", send_ignore_eos=False)))
    assert "ignore_eos" not in body
    assert TargetSpec("http://h:1/v1/", "m").url == "http://h:1"
    text_spec = type(spec)("hi", 0, 3, 3)
    body = json.loads(request_body(text_spec, TargetSpec("http://h:1", "m", endpoint="chat")))
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "prompt" not in body
    with pytest.raises(ValueError, match="chat endpoint needs text"):
        request_body(spec, TargetSpec("http://h:1", "m", endpoint="chat"))


def test_sharegpt_lengths_from_a_tokenizer_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "there": 2, "a": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "model").mkdir()
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    path = tmp_path / "d.json"
    _write_sharegpt(path, SHAREGPT)
    for tokenizer in (str(tmp_path / "model"), str(tmp_path / "model" / "tokenizer.json")):
        w = make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(path), tokenizer=tokenizer))
        assert w.rebuildable
        spec = next(s for s in w.take(3) if s.prompt == "hello there")
        assert spec.target_input_len == 2 and spec.max_tokens == 6  # "a b c d e f": six words
    with pytest.raises(WorkloadError, match="cannot load tokenizer"):
        make_workload(WorkloadOptions(kind="sharegpt", dataset_path=str(path), tokenizer=str(tmp_path / "nope")))
