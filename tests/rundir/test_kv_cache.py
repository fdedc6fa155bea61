"""The KV cache a target published, and how many requests of a size it holds (rundir.kv_cache)."""

from __future__ import annotations

import pytest

from rundir.kv_cache import KVCacheSize


def test_vllm_keeps_one_block_back_and_a_request_takes_whole_blocks():
    cache = KVCacheSize(16, 128, "vllm")
    assert cache.usable_blocks == 15
    assert cache.blocks_per_request(1008) == 8 and cache.blocks_per_request(1024) == 8
    assert cache.blocks_per_request(1025) == 9
    assert cache.requests_that_fit(1008) == 1  # 15 // 8
    assert KVCacheSize(16, 128, "refengine").requests_that_fit(1008) == 2  # every block usable


def test_read_from_the_labels_a_server_published():
    facts = {"cache_config": {"num_gpu_blocks": "16", "block_size": "128", "cache_dtype": "auto"}, "engine": "vllm"}
    assert KVCacheSize.from_engine_facts(facts) == KVCacheSize(16, 128, "vllm")
    # recorded before the engine was kept: every block counts
    assert (
        KVCacheSize.from_engine_facts({"cache_config": {"num_gpu_blocks": "16", "block_size": "16"}}).engine
        == "unknown"
    )
    assert KVCacheSize.from_engine_facts({}) is None
    assert KVCacheSize.from_cache_config({"num_gpu_blocks": "None", "block_size": "16"}) is None  # not yet profiled
    assert KVCacheSize.from_cache_config({"num_gpu_blocks": "0", "block_size": "16"}) is None


def test_an_impossible_cache_is_refused():
    with pytest.raises(ValueError):
        KVCacheSize(0, 16)
