"""The physical KV blocks: reference counts, an LRU free queue and the prefix-cache hash map.

A block is in exactly one of three states:
  - free: ref_cnt 0, no hash; sits in the free queue;
  - cached: ref_cnt 0 with a hash; sits in the free queue AND in the hash map, so a prefix
    hit can revive it until allocation takes it from the queue head and evicts its hash;
  - in use: ref_cnt > 0 (possibly also cached); never in the free queue.
Freed blocks go to the queue tail and allocation takes from the head, so the least recently
used cached block is the one evicted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    # Chained hash of this block's tokens and everything before it; None while not cached.
    block_hash: int | None = None
    # The full block's tokens and its parent's hash, kept so a hit can be verified: a hash
    # collision (of the block or of the chain leading to it) must not hand out someone else's KV.
    token_ids: tuple[int, ...] | None = None
    parent_hash: int | None = None
    # Free-queue links; both None exactly when the block is not in the free queue.
    prev_free: KVCacheBlock | None = field(default=None, repr=False)
    next_free: KVCacheBlock | None = field(default=None, repr=False)

    def reset_hash(self) -> None:
        self.block_hash = None
        self.token_ids = None
        self.parent_hash = None


class FreeBlockQueue:
    """Doubly linked list with sentinels: O(1) popleft, append and remove-from-the-middle.

    A deque cannot remove from the middle in O(1), and a prefix hit must pull a cached block
    out of the middle of the queue ("touch" it) without scanning.
    """

    def __init__(self, blocks: list[KVCacheBlock]):
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVCacheBlock:
        block = self._head.next_free
        assert block is not None, "the head sentinel always links to a block or the tail"
        if block is self._tail:
            raise ValueError("no free blocks left")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        if block.prev_free is None or block.next_free is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        if block.prev_free is not None or block.next_free is not None:
            raise ValueError(f"block {block.block_id} is already in the free queue")
        last = self._tail.prev_free
        assert last is not None, "the tail sentinel always links to a block or the head"
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_free_blocks += 1

    def __len__(self) -> int:
        return self.num_free_blocks

    def __iter__(self) -> Iterator[KVCacheBlock]:
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free

    def check_links(self) -> list[KVCacheBlock]:
        """Walk both directions; return the blocks in order (head first) if the links agree."""
        forward, block = [], self._head
        while block.next_free is not None:
            nxt = block.next_free
            assert nxt.prev_free is block, f"free queue link broken after block {block.block_id}"
            if nxt is self._tail:
                break
            forward.append(nxt)
            assert len(forward) <= self.num_free_blocks, "free queue longer than its counter (a cycle?)"
            block = nxt
        assert block.next_free is self._tail, "free queue does not end at the tail sentinel"
        assert len(forward) == self.num_free_blocks, (
            f"free queue holds {len(forward)} blocks but counts {self.num_free_blocks}"
        )
        return forward


class BlockPool:
    """All KV blocks of one cache, the free queue and the hash -> block map of cached blocks."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        # One block per hash: a second block with the same content stays uncached (it is freed
        # like any other), which keeps lookup a dict access.
        self.cached_blocks: dict[int, KVCacheBlock] = {}

    def get_num_free_blocks(self) -> int:
        """Blocks allocation can take now: truly free ones plus cached ones nobody references."""
        return self.free_queue.num_free_blocks

    @property
    def usage(self) -> float:
        return 1.0 - self.get_num_free_blocks() / self.num_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"asked for {num_blocks} blocks but only {self.get_num_free_blocks()} are free")
        new_blocks = []
        for _ in range(num_blocks):
            block = self.free_queue.popleft()
            self._evict(block)
            block.ref_cnt = 1
            new_blocks.append(block)
        return new_blocks

    def _evict(self, block: KVCacheBlock) -> None:
        if block.block_hash is not None:
            if self.cached_blocks.get(block.block_hash) is block:
                del self.cached_blocks[block.block_hash]
            block.reset_hash()

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on blocks found in the prefix cache (reviving unreferenced ones)."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference on each block, in the given order; ref-0 blocks join the queue tail."""
        for block in blocks:
            assert block.ref_cnt > 0, f"block {block.block_id} freed more often than it was taken"
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue.append(block)

    def cache_full_block(
        self, block: KVCacheBlock, block_hash: int, token_ids: tuple[int, ...], parent_hash: int | None
    ) -> bool:
        """Publish a filled block under its hash; False when that hash already has a block."""
        if block.block_hash is not None or block_hash in self.cached_blocks:
            return False
        block.block_hash = block_hash
        block.token_ids = tuple(token_ids)
        block.parent_hash = parent_hash
        self.cached_blocks[block_hash] = block
        return True

    def get_cached_block(self, block_hash: int) -> KVCacheBlock | None:
        return self.cached_blocks.get(block_hash)

    def check_integrity(self) -> dict[str, int]:
        """Assert the three-state invariant; return the count of blocks in each state."""
        queued = self.free_queue.check_links()
        queued_ids = {b.block_id for b in queued}
        assert len(queued_ids) == len(queued), "a block appears twice in the free queue"
        counts = {"free": 0, "cached": 0, "used": 0}
        for block in self.blocks:
            assert block.ref_cnt >= 0, f"block {block.block_id} has ref_cnt {block.ref_cnt}"
            if block.ref_cnt == 0:
                assert block.block_id in queued_ids, f"unreferenced block {block.block_id} is not free-queued"
                counts["cached" if block.block_hash is not None else "free"] += 1
            else:
                assert block.block_id not in queued_ids, f"block {block.block_id} in use but free-queued"
                counts["used"] += 1
            if block.block_hash is not None:
                assert self.cached_blocks.get(block.block_hash) is block, (
                    f"block {block.block_id} has a hash but the map does not point at it"
                )
                assert block.token_ids is not None, f"cached block {block.block_id} lost its tokens"
        for block_hash, block in self.cached_blocks.items():
            assert block.block_hash == block_hash, (
                f"hash map entry {block_hash} points at block {block.block_id} hashed {block.block_hash}"
            )
        assert sum(counts.values()) == self.num_blocks, f"{counts} does not add up to {self.num_blocks}"
        assert counts["free"] + counts["cached"] == self.get_num_free_blocks()
        return counts
