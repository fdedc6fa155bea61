"""Which KV blocks each request holds, and the prefix cache over them.

The scheduler asks three things: what prefix of a request is already cached
(`get_computed_blocks`), can it have room for N more tokens (`allocate_slots`, all or nothing),
and, after the model computed them, publish the request's newly filled blocks (`cache_blocks`).
Blocks are published only after their KV has been written, so no request can hit a block that
is still being computed in the same step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from refengine.config import CacheConfig
from refengine.core.block_pool import BlockPool, KVCacheBlock
from refengine.request import Request


def hash_block_tokens(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Chained block hash: equal hashes should mean equal token prefixes (hits are verified anyway)."""
    return hash((parent_hash, tuple(token_ids)))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(self, cache_config: CacheConfig, max_model_len: int):
        self.block_size = cache_config.block_size
        self.num_blocks = cache_config.num_blocks
        self.max_model_len = max_model_len
        self.contiguous = cache_config.kv_layout == "contiguous"
        # Contiguous mode is the "no paging" baseline: sharing blocks would flatter it.
        self.enable_caching = cache_config.enable_prefix_caching and not self.contiguous
        self.blocks_per_contiguous_request = cdiv(max_model_len, self.block_size)
        self.block_pool = BlockPool(self.num_blocks)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # How many leading blocks of each request have been offered to the prefix cache.
        self.num_cached_blocks: dict[str, int] = {}
        # vLLM semantics, in tokens: queries = tokens looked up, hits = tokens found cached.
        # Counted once per admission (in allocate_slots), so a request that waits several
        # steps for room is not counted once per attempt.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # ---- hashing -------------------------------------------------------------------------

    def _update_block_hashes(self, request: Request, num_tokens: int | None = None) -> None:
        """Extend request.block_hashes to cover the full blocks among its first num_tokens tokens."""
        num_tokens = request.num_tokens if num_tokens is None else num_tokens
        num_full = num_tokens // self.block_size
        hashes = request.block_hashes
        if len(hashes) >= num_full:
            return
        tokens = request.all_token_ids
        bs = self.block_size
        for i in range(len(hashes), num_full):
            parent = hashes[i - 1] if i else None
            hashes.append(hash_block_tokens(parent, tokens[i * bs : (i + 1) * bs]))

    # ---- lookup --------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest verified cached prefix, leaving at least one token to compute for logits."""
        if not self.enable_caching:
            return [], 0
        self._update_block_hashes(request)
        tokens = request.all_token_ids
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        hits: list[KVCacheBlock] = []
        for i in range(max_blocks):
            block_hash = request.block_hashes[i]
            block = self.block_pool.get_cached_block(block_hash)
            parent = request.block_hashes[i - 1] if i else None
            if block is None or block.parent_hash != parent or block.token_ids != tuple(tokens[i * bs : (i + 1) * bs]):
                break
            hits.append(block)
        return hits, len(hits) * bs

    # ---- allocation ----------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        watermark_blocks: int = 0,
    ) -> list[int] | None:
        """Make room for num_new_tokens more tokens; None (and no change at all) if it does not fit.

        new_computed_blocks are the prefix hits of a request being admitted; they count as
        computed tokens in front of the new ones. watermark_blocks must stay free afterwards.
        """
        req_id = request.request_id
        blocks = self.req_to_blocks.get(req_id, [])
        admitting = req_id not in self.req_to_blocks
        assert not new_computed_blocks or admitting, "prefix hits are only taken at admission"
        num_tokens_needed = request.num_computed_tokens + len(new_computed_blocks) * self.block_size + num_new_tokens
        if self.contiguous:
            num_required = self.blocks_per_contiguous_request
            assert num_tokens_needed <= num_required * self.block_size, "contiguous request outgrew max_model_len"
        else:
            num_required = cdiv(num_tokens_needed, self.block_size)
        num_new_blocks = max(0, num_required - len(blocks) - len(new_computed_blocks))
        # Reviving an unreferenced cached hit takes it out of the free queue too.
        num_revived = sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        if num_new_blocks + num_revived + watermark_blocks > self.block_pool.get_num_free_blocks():
            return None

        if admitting and self.enable_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += len(new_computed_blocks) * self.block_size
        self.block_pool.touch(new_computed_blocks)
        blocks = list(new_computed_blocks) + blocks
        blocks.extend(self.block_pool.get_new_blocks(num_new_blocks))
        self.req_to_blocks[req_id] = blocks
        if admitting:
            self.num_cached_blocks[req_id] = len(new_computed_blocks)
        return [b.block_id for b in blocks]

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Publish the request's blocks that are full of computed tokens (call after compute)."""
        if not self.enable_caching or request.request_id not in self.req_to_blocks:
            return
        blocks = self.req_to_blocks[request.request_id]
        num_full = min(num_computed_tokens // self.block_size, len(blocks))
        start = self.num_cached_blocks[request.request_id]
        if num_full <= start:
            return
        self._update_block_hashes(request, num_full * self.block_size)
        tokens = request.all_token_ids
        bs = self.block_size
        for i in range(start, num_full):
            parent = request.block_hashes[i - 1] if i else None
            # A duplicate (same content computed twice concurrently) simply stays uncached.
            self.block_pool.cache_full_block(
                blocks[i], request.block_hashes[i], tuple(tokens[i * bs : (i + 1) * bs]), parent
            )
        self.num_cached_blocks[request.request_id] = num_full

    def free(self, request: Request) -> None:
        """Release a request's blocks; its full blocks stay cached until evicted."""
        blocks = self.req_to_blocks.pop(request.request_id, None)
        self.num_cached_blocks.pop(request.request_id, None)
        if blocks:
            # Tail first: the end of a sequence is the least likely to be shared, so it is
            # queued first and evicted before the prefix (vLLM does the same).
            self.block_pool.free_blocks(reversed(blocks))

    # ---- queries -------------------------------------------------------------------------

    def get_block_ids(self, request: Request) -> list[int]:
        return [b.block_id for b in self.req_to_blocks.get(request.request_id, [])]

    def get_num_free_blocks(self) -> int:
        return self.block_pool.get_num_free_blocks()

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (referenced by a request); cached-but-free blocks count as free."""
        return self.block_pool.usage

    def check_integrity(self) -> dict[str, int]:
        """Assert free + cached-unreferenced + in-use = total and that refs match the holders."""
        counts = self.block_pool.check_integrity()
        holders: Counter[int] = Counter()
        for req_id, blocks in self.req_to_blocks.items():
            ids = [b.block_id for b in blocks]
            assert len(set(ids)) == len(ids), f"request {req_id} holds a block twice: {ids}"
            if self.contiguous:
                assert len(blocks) == self.blocks_per_contiguous_request, f"{req_id}: contiguous reservation broken"
            assert self.num_cached_blocks.get(req_id, 0) <= len(blocks)
            holders.update(ids)
        for block in self.block_pool.blocks:
            assert block.ref_cnt == holders[block.block_id], (
                f"block {block.block_id}: ref_cnt {block.ref_cnt} but held by {holders[block.block_id]} requests"
            )
        if not self.enable_caching:
            assert not self.block_pool.cached_blocks, "blocks were cached with prefix caching off"
        assert counts["used"] == len(holders)
        return counts
