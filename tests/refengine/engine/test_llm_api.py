"""The offline API: prompt forms, sampling, stops, timestamps and the errors users can cause."""

import pytest

from refengine import LLM, RefEngineError, SamplingParams


def test_generate_text_and_token_prompts(tiny_llm):
    tok = tiny_llm.get_tokenizer()
    ids = tok.encode("the cat sat on the mat")
    outs = tiny_llm.generate(
        ["the cat sat on the mat", ids, {"prompt_token_ids": ids}],
        SamplingParams(max_tokens=8, temperature=0, ignore_eos=True),
    )
    assert len(outs) == 3
    assert outs[0].prompt_token_ids == ids
    assert outs[0].outputs[0].token_ids == outs[1].outputs[0].token_ids == outs[2].outputs[0].token_ids
    assert outs[0].outputs[0].text == tok.decode(outs[0].outputs[0].token_ids)
    assert outs[0].outputs[0].finish_reason == "length"


def test_outputs_keep_prompt_order(tiny_llm):
    prompts = [[5] * n for n in (50, 3, 20, 1, 9)]
    outs = tiny_llm.generate(prompts, SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    assert [o.prompt_token_ids for o in outs] == prompts


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_llm):
    p = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50, seed=1234, ignore_eos=True)
    alone = tiny_llm.generate([[7, 8, 9]], p)[0].outputs[0].token_ids
    crowd = tiny_llm.generate(
        [[1, 2, 3, 4]] * 3 + [[7, 8, 9]], [SamplingParams(max_tokens=16, temperature=1.0)] * 3 + [p]
    )
    assert crowd[3].outputs[0].token_ids == alone
    other = tiny_llm.generate([[7, 8, 9]], SamplingParams(max_tokens=16, temperature=1.0, seed=99, ignore_eos=True))
    assert other[0].outputs[0].token_ids != alone


def test_top_k_1_equals_greedy(tiny_llm):
    g = tiny_llm.generate([[3, 4, 5]], SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))[0]
    k1 = tiny_llm.generate([[3, 4, 5]], SamplingParams(max_tokens=10, temperature=0.8, top_k=1, ignore_eos=True))[0]
    assert g.outputs[0].token_ids == k1.outputs[0].token_ids


def test_stop_token_ids_and_max_tokens(tiny_llm):
    greedy = tiny_llm.generate([[11, 12, 13]], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))[0]
    toks = greedy.outputs[0].token_ids
    stop_at = toks[4]
    first = toks.index(stop_at)
    out = tiny_llm.generate(
        [[11, 12, 13]], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, stop_token_ids=[stop_at])
    )[0]
    assert out.outputs[0].token_ids == toks[: first + 1]
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == stop_at
    # min_tokens suppresses the stop token until enough tokens exist.
    out = tiny_llm.generate(
        [[11, 12, 13]],
        SamplingParams(max_tokens=12, min_tokens=12, temperature=0, ignore_eos=True, stop_token_ids=[stop_at]),
    )[0]
    assert len(out.outputs[0].token_ids) == 12 and stop_at not in out.outputs[0].token_ids


def test_stop_string_cuts_text(tiny_llm):
    full = tiny_llm.generate(["once upon a time"], SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))[0]
    text = full.outputs[0].text
    assert len(text) > 6, text
    stop = text[3:6]
    out = tiny_llm.generate(
        ["once upon a time"], SamplingParams(max_tokens=24, temperature=0, ignore_eos=True, stop=[stop])
    )[0]
    assert out.outputs[0].text == text[: text.index(stop)]
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == stop
    assert len(out.outputs[0].token_ids) < 24


def test_timestamps_are_ordered(tiny_llm):
    out = tiny_llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))[0]
    ts = out.timestamps
    assert ts.arrival <= ts.first_scheduled <= ts.first_token <= ts.finished


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda llm: llm.generate([[1] * 256]), "max_model_len"),
        (lambda llm: llm.generate([[1, 2]], SamplingParams(max_tokens=0)), "max_tokens"),
        (lambda llm: llm.generate([[]]), "empty"),
        (lambda llm: llm.generate([[10**9]]), "token ids"),
        (lambda llm: llm.generate([[1, 2]], SamplingParams(temperature=-1)), "temperature"),
    ],
)
def test_user_errors_are_clear_and_engine_keeps_working(tiny_llm, make, fragment):
    with pytest.raises(RefEngineError, match=fragment):
        make(tiny_llm)
    assert not tiny_llm.llm_engine.has_unfinished_requests()
    out = tiny_llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 2


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(model="/nonexistent/model/dir"), "never downloads"),
        (dict(model="tiny-test", num_gpu_blocks_override=2, max_model_len=256), "needs 16 blocks"),
        (dict(model="tiny-test", max_model_len=10**7), "max_position_embeddings"),
        (dict(model="tiny-test", scheduling_policy="lifo"), "scheduling_policy"),
        (dict(model="tiny-test", no_such_arg=1), "unknown engine argument"),
    ],
)
def test_bad_engine_arguments(kwargs, fragment):
    with pytest.raises(RefEngineError, match=fragment):
        LLM(**kwargs)


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}')
    with pytest.raises(RefEngineError, match="GPT2LMHeadModel"):
        LLM(model=str(tmp_path))
