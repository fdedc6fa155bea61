"""BlockPool and FreeBlockQueue: O(1) LRU free list, ref counts, cached-block eviction."""

import pytest

from refengine.core.block_pool import BlockPool, FreeBlockQueue, KVCacheBlock


def ids(blocks):
    return [b.block_id for b in blocks]


def test_free_queue_popleft_append_and_remove_from_middle():
    blocks = [KVCacheBlock(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    assert len(q) == 5 and ids(q) == [0, 1, 2, 3, 4]
    q.remove(blocks[2])
    assert ids(q) == [0, 1, 3, 4] and len(q) == 4
    assert blocks[2].prev_free is None and blocks[2].next_free is None
    assert q.popleft() is blocks[0]
    q.append(blocks[2])
    q.append(blocks[0])
    assert ids(q) == [1, 3, 4, 2, 0]
    assert ids(q.check_links()) == [1, 3, 4, 2, 0]
    q.remove(blocks[0])  # the tail
    q.remove(blocks[1])  # the head
    assert ids(q) == [3, 4, 2]


def test_free_queue_rejects_double_append_and_missing_remove():
    blocks = [KVCacheBlock(i) for i in range(2)]
    q = FreeBlockQueue(blocks)
    with pytest.raises(ValueError):
        q.append(blocks[0])
    q.remove(blocks[0])
    with pytest.raises(ValueError):
        q.remove(blocks[0])
    q.popleft()
    with pytest.raises(ValueError):
        q.popleft()


def test_get_new_blocks_takes_from_the_head_with_ref_one():
    pool = BlockPool(4)
    got = pool.get_new_blocks(3)
    assert ids(got) == [0, 1, 2]
    assert all(b.ref_cnt == 1 for b in got)
    assert pool.get_num_free_blocks() == 1
    assert pool.usage == pytest.approx(0.75)
    with pytest.raises(ValueError):
        pool.get_new_blocks(2)
    assert pool.get_num_free_blocks() == 1, "a failed allocation must not take anything"
    pool.check_integrity()


def test_freed_blocks_go_to_the_tail_in_the_given_order():
    pool = BlockPool(4)
    a = pool.get_new_blocks(4)
    pool.free_blocks([a[2], a[0]])
    pool.free_blocks([a[3]])
    assert ids(pool.free_queue) == [2, 0, 3]
    assert ids(pool.get_new_blocks(2)) == [2, 0]
    pool.check_integrity()


def test_shared_block_returns_to_the_queue_only_at_ref_zero():
    pool = BlockPool(2)
    (b,) = pool.get_new_blocks(1)
    pool.touch([b])
    assert b.ref_cnt == 2
    pool.free_blocks([b])
    assert b.ref_cnt == 1 and pool.get_num_free_blocks() == 1
    pool.free_blocks([b])
    assert b.ref_cnt == 0 and pool.get_num_free_blocks() == 2
    with pytest.raises(AssertionError):
        pool.free_blocks([b])


def test_cached_block_stays_in_map_and_queue_until_evicted():
    pool = BlockPool(3)
    a, b, c = pool.get_new_blocks(3)
    assert pool.cache_full_block(a, 111, (1, 2), None)
    assert pool.cache_full_block(b, 222, (3, 4), 111)
    pool.free_blocks([b, a, c])
    counts = pool.check_integrity()
    assert counts == {"free": 1, "cached": 2, "used": 0}
    assert pool.get_cached_block(111) is a and pool.get_num_free_blocks() == 3
    # LRU: b was freed first, so b's hash is the first one evicted.
    (x,) = pool.get_new_blocks(1)
    assert x is b and b.block_hash is None and pool.get_cached_block(222) is None
    assert pool.get_cached_block(111) is a
    pool.check_integrity()


def test_touch_revives_a_cached_block_from_the_middle_of_the_queue():
    pool = BlockPool(3)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_block(blocks[1], 5, (0,), None)
    pool.free_blocks(blocks)
    pool.touch([blocks[1]])
    assert blocks[1].ref_cnt == 1 and ids(pool.free_queue) == [0, 2]
    assert pool.get_cached_block(5) is blocks[1]
    assert ids(pool.get_new_blocks(2)) == [0, 2]
    assert pool.get_cached_block(5) is blocks[1], "an in-use cached block is never evicted"
    pool.check_integrity()


def test_cache_full_block_keeps_the_first_block_for_a_hash():
    pool = BlockPool(2)
    a, b = pool.get_new_blocks(2)
    assert pool.cache_full_block(a, 9, (1,), None)
    assert not pool.cache_full_block(b, 9, (1,), None)
    assert not pool.cache_full_block(a, 10, (1,), None), "a block is cached under one hash only"
    assert b.block_hash is None and pool.get_cached_block(9) is a
    pool.check_integrity()


def test_check_integrity_catches_corruption():
    pool = BlockPool(3)
    a, _ = pool.get_new_blocks(2)
    pool.check_integrity()
    a.ref_cnt = 0  # unreferenced yet not in the free queue
    with pytest.raises(AssertionError):
        pool.check_integrity()
    a.ref_cnt = 1
    pool.cached_blocks[77] = a  # map entry whose block carries another hash
    with pytest.raises(AssertionError):
        pool.check_integrity()
