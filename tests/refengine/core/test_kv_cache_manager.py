"""KVCacheManager: allocation all-or-nothing, prefix caching with verified hits, LRU, layouts."""

import math

import pytest
from core_sim import make_request

from refengine.config import CacheConfig
from refengine.core import kv_cache_manager as kvm
from refengine.core.kv_cache_manager import KVCacheManager


def manager(num_blocks=16, block_size=4, max_model_len=64, **kw):
    return KVCacheManager(CacheConfig(block_size=block_size, num_blocks=num_blocks, **kw), max_model_len)


def admit(kv, req):
    """What the scheduler does at admission: look up, allocate the rest, mark computed."""
    hits, num_cached = kv.get_computed_blocks(req)
    ids = kv.allocate_slots(req, req.num_tokens - num_cached, hits)
    assert ids is not None
    req.num_computed_tokens = req.num_tokens
    kv.cache_blocks(req, req.num_computed_tokens)
    kv.check_integrity()
    return ids, num_cached


def test_block_hashes_are_chained_and_extended_lazily_with_output_tokens():
    kv = manager()
    req = make_request("a", 6)
    kv.get_computed_blocks(req)
    assert req.block_hashes == [kvm.hash_block_tokens(None, [100, 101, 102, 103])]
    req.output_token_ids += [1, 2]
    kv.get_computed_blocks(req)
    assert len(req.block_hashes) == 2
    assert req.block_hashes[1] == kvm.hash_block_tokens(req.block_hashes[0], [104, 105, 1, 2])
    other = make_request("b", [0, 0, 0, 0] + [104, 105, 1, 2])
    kv.get_computed_blocks(other)
    assert other.block_hashes[1] != req.block_hashes[1], "the hash depends on the whole prefix"


def test_allocate_slots_grows_by_blocks_and_failure_changes_nothing():
    kv = manager(num_blocks=4)
    a, b = make_request("a", 5), make_request("b", 9)
    assert kv.allocate_slots(a, 5) is not None and len(kv.get_block_ids(a)) == 2
    a.num_computed_tokens = 5
    assert kv.allocate_slots(a, 3) == kv.get_block_ids(a) and len(kv.get_block_ids(a)) == 2
    before = (kv.get_num_free_blocks(), dict(kv.req_to_blocks))
    assert kv.allocate_slots(b, 9) is None  # needs 3, 2 free
    assert (kv.get_num_free_blocks(), dict(kv.req_to_blocks)) == before
    assert kv.get_block_ids(b) == [] and kv.prefix_cache_queries == 5
    kv.check_integrity()
    assert kv.usage == pytest.approx(0.5)


def test_watermark_blocks_must_stay_free():
    kv = manager(num_blocks=4)
    req = make_request("a", 8)
    assert kv.allocate_slots(req, 8, watermark_blocks=3) is None
    assert kv.allocate_slots(req, 8, watermark_blocks=2) is not None
    assert kv.get_num_free_blocks() == 2


def test_prefix_hit_between_two_requests_counted_in_tokens():
    kv = manager()
    shared = list(range(10))
    a = make_request("a", shared + [50, 51])
    b = make_request("b", shared + [60, 61, 62])
    ids_a, cached_a = admit(kv, a)
    assert cached_a == 0 and kv.prefix_cache_queries == 12 and kv.prefix_cache_hits == 0
    ids_b, cached_b = admit(kv, b)
    assert cached_b == 8  # two full shared blocks; the third block differs
    assert ids_b[:2] == ids_a[:2] and ids_b[2] != ids_a[2]
    assert kv.prefix_cache_queries == 12 + 13 and kv.prefix_cache_hits == 8
    assert all(kv.block_pool.blocks[i].ref_cnt == 2 for i in ids_a[:2])
    kv.free(a)
    kv.free(b)
    counts = kv.check_integrity()
    assert counts["used"] == 0 and counts["cached"] == 4  # a: 3 full blocks, b: 1 of its own


def test_hit_never_covers_the_whole_prompt():
    kv = manager()
    admit(kv, make_request("a", 12))
    again = make_request("b", 12)  # same 12 tokens = exactly 3 blocks, all cached
    hits, num_cached = kv.get_computed_blocks(again)
    assert num_cached == 8 and len(hits) == 2, "the last token must be computed to get logits"
    longer = make_request("c", 13)
    assert kv.get_computed_blocks(longer)[1] == 12


def test_hash_collision_is_not_a_hit(monkeypatch):
    monkeypatch.setattr(kvm, "hash_block_tokens", lambda parent, tokens: 42)
    kv = manager()
    admit(kv, make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9]))
    b = make_request("b", [9, 9, 9, 9, 5, 6, 7, 8, 9])
    assert kv.get_computed_blocks(b) == ([], 0)
    c = make_request("c", [1, 2, 3, 4, 0, 0, 0, 0, 9])
    hits, num_cached = kv.get_computed_blocks(c)
    assert num_cached == 4, "the first block really matches; the second only collides"


def test_collision_in_the_chain_is_not_a_hit(monkeypatch):
    # A hash that ignores the parent: block 2 of "b" collides with block 2 of "a" although
    # their first blocks differ, so a's second block holds KV computed after other tokens.
    monkeypatch.setattr(kvm, "hash_block_tokens", lambda parent, tokens: hash(tuple(tokens)))
    kv = manager()
    a = make_request("a", [1, 1, 1, 1, 5, 6, 7, 8, 0])
    b = make_request("b", [2, 2, 2, 2, 5, 6, 7, 8, 0])
    admit(kv, a)
    admit(kv, b)
    kv.free(a)
    kv.free(b)
    # Make a's second block the most recently used, then evict a's first block.
    a1 = kv.block_pool.get_cached_block(hash((5, 6, 7, 8)))
    kv.block_pool.touch([a1])
    kv.block_pool.free_blocks([a1])
    while kv.block_pool.get_cached_block(hash((1, 1, 1, 1))) is not None:
        kv.block_pool.get_new_blocks(1)
    c = make_request("c", [2, 2, 2, 2, 5, 6, 7, 8, 0])
    assert kv.block_pool.get_cached_block(hash((5, 6, 7, 8))) is not None
    assert kv.get_computed_blocks(c)[1] == 4, "a's second block was computed after other tokens"


def test_freed_sequence_is_evicted_tail_first():
    kv = manager(num_blocks=6)
    a = make_request("a", 13)  # 3 full blocks + 1 partial = 4 blocks
    admit(kv, a)
    kv.free(a)
    filler = make_request("f", 4, start=900)
    assert kv.allocate_slots(filler, 4) is not None  # takes a never-used block first
    filler2 = make_request("g", 12, start=900)
    assert kv.allocate_slots(filler2, 12) is not None  # the last unused block, a's partial, a's 3rd
    again = make_request("h", 13)
    assert kv.get_computed_blocks(again)[1] == 8, "the prefix outlives the tail of the sequence"


def test_lru_prefers_evicting_the_least_recently_used_prefix():
    kv = manager(num_blocks=4)
    old, new = make_request("old", 4, start=0), make_request("new", 4, start=500)
    admit(kv, old)
    kv.free(old)
    admit(kv, new)
    kv.free(new)
    # The remaining never-used blocks go first, then old's block, and new's block last.
    kv.allocate_slots(make_request("x", 9, start=900), 9)
    assert kv.get_computed_blocks(make_request("n", 5, start=500))[1] == 4
    assert kv.get_computed_blocks(make_request("o", 5, start=0))[1] == 0


def test_prefix_caching_off_never_looks_up_or_caches():
    kv = manager(enable_prefix_caching=False)
    admit(kv, make_request("a", 12))
    assert kv.get_computed_blocks(make_request("b", 12)) == ([], 0)
    assert not kv.block_pool.cached_blocks
    assert kv.prefix_cache_queries == 0 and kv.prefix_cache_hits == 0


@pytest.mark.parametrize("max_model_len", [64, 30])
def test_contiguous_reserves_max_model_len_up_front(max_model_len):
    kv = manager(num_blocks=40, kv_layout="contiguous", max_model_len=max_model_len)
    per_request = math.ceil(max_model_len / 4)
    req = make_request("a", 5)
    ids = kv.allocate_slots(req, 5)
    assert len(ids) == per_request
    req.num_computed_tokens = 5
    assert kv.allocate_slots(req, 20) == ids, "growth never allocates in contiguous mode"
    kv.cache_blocks(req, 25)
    assert not kv.block_pool.cached_blocks, "no prefix caching in contiguous mode"
    assert kv.get_computed_blocks(make_request("b", 30)) == ([], 0)
    kv.check_integrity()
    kv.free(req)
    assert kv.get_num_free_blocks() == 40


def test_check_integrity_catches_ref_count_mismatch():
    kv = manager()
    a = make_request("a", 8)
    kv.allocate_slots(a, 8)
    kv.check_integrity()
    kv.req_to_blocks["a"][0].ref_cnt += 1
    with pytest.raises(AssertionError):
        kv.check_integrity()
