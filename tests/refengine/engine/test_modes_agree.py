"""Paged, contiguous and static modes, prefix caching and chunked prefill on or off, preemption:
all are scheduling choices, so greedy tokens must come out identical."""

import random

import pytest

from refengine import LLM, SamplingParams


def _prompts():
    rng = random.Random(7)
    shared = [rng.randrange(5, 4000) for _ in range(40)]  # a prefix spanning 2.5 blocks of 16
    prompts = [shared + [rng.randrange(5, 4000) for _ in range(rng.randint(1, 30))] for _ in range(5)]
    prompts += [[rng.randrange(5, 4000) for _ in range(rng.randint(3, 90))] for _ in range(7)]
    prompts.append(shared[:32])  # exactly two full blocks: hit must leave one token
    return prompts


PARAMS = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
BASE = dict(max_model_len=256, seed=0)


@pytest.fixture(scope="module")
def reference():
    llm = LLM("tiny-test", enable_prefix_caching=False, enable_chunked_prefill=False, **BASE)
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(), PARAMS)]


MODES = {
    "paged+prefix+chunked": dict(),
    "paged, small token budget (chunks every prompt)": dict(max_num_batched_tokens=24),
    "paged, long-prefill cap": dict(long_prefill_token_threshold=7),
    "contiguous": dict(kv_layout="contiguous", enable_prefix_caching=False),
    "static batching": dict(batching="static"),
    "static + contiguous": dict(batching="static", kv_layout="contiguous"),
    "preemption (tiny KV budget)": dict(num_gpu_blocks_override=20, max_num_seqs=8),
    "sjf": dict(scheduling_policy="sjf"),
    "max_num_seqs=2": dict(max_num_seqs=2),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_tokens_identical_across_modes(mode, reference):
    llm = LLM("tiny-test", **BASE, **MODES[mode])
    got = [o.outputs[0].token_ids for o in llm.generate(_prompts(), PARAMS)]
    assert got == reference
    assert all(len(t) == PARAMS.max_tokens for t in got)
    llm.llm_engine.scheduler.kv_cache_manager.check_integrity()
    stats = llm.llm_engine.stats()
    assert stats.num_running == stats.num_waiting == 0
    if mode.startswith("preemption"):
        assert stats.num_preemptions_total > 0, "the tiny KV budget was meant to force preemption"
    if llm.llm_engine.cache_config.enable_prefix_caching:
        # Run again: now every prompt's full blocks are cached, and the tokens must not change.
        again = [o.outputs[0].token_ids for o in llm.generate(_prompts(), PARAMS)]
        assert again == reference
        assert llm.llm_engine.stats().prefix_cache_hits > 0


def test_prefix_cache_hits_counted_in_tokens():
    llm = LLM("tiny-test", **BASE)
    shared = list(range(10, 74))  # 64 tokens = 4 blocks
    llm.generate([shared + [5]], SamplingParams(max_tokens=2, temperature=0))
    before = llm.llm_engine.stats()
    out = llm.generate([shared + [6]], SamplingParams(max_tokens=2, temperature=0))[0]
    after = llm.llm_engine.stats()
    assert after.prefix_cache_hits - before.prefix_cache_hits == 64
    assert after.prefix_cache_queries - before.prefix_cache_queries == 65
    assert out.num_cached_tokens == 64
