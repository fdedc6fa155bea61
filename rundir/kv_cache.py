"""The KV cache a target says it has, and how many requests of a size it holds at once.

Engines publish their cache as the info metric `vllm:cache_config_info` (num_gpu_blocks,
block_size), which a sweep records in run.json (`target.engine_facts.cache_config`, with the
engine that published it). The KV ramp (`llmdiag oom --ramp`) holds its observed capacity against
this count, and the P99 diagnosis names a KV cache that cannot hold the level's load from it: one
count, here, for both (docs/diagnosis.md, "KV capacity").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Blocks an engine counts in num_gpu_blocks but never gives a request: vLLM v1's block pool takes
# one "null block" out of the free queue at start (its KV usage gauge is over the rest).
RESERVED_BLOCKS = {"vllm": 1}


@dataclass(frozen=True)
class KVCacheSize:
    num_blocks: int  # as published (num_gpu_blocks)
    block_size: int  # tokens per block
    engine: str = "unknown"  # refengine | vllm | sglang | ... (probes.prom's engine names)

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.block_size < 1:
            raise ValueError(f"a KV cache of {self.num_blocks} blocks of {self.block_size} tokens")

    @property
    def usable_blocks(self) -> int:
        return max(0, self.num_blocks - RESERVED_BLOCKS.get(self.engine, 0))

    def blocks_per_request(self, tokens: float) -> int:
        """Blocks one request of `tokens` (prompt + output) takes: none of them shared (unique prompts)."""
        return max(1, -(-int(round(tokens)) // self.block_size))

    def requests_that_fit(self, tokens: float) -> int:
        """Requests of `tokens` each that the cache holds at once (no prefix shared between them)."""
        return self.usable_blocks // self.blocks_per_request(tokens)

    @classmethod
    def from_cache_config(cls, cache_config: dict[str, Any], engine: str = "unknown") -> KVCacheSize | None:
        """From `vllm:cache_config_info`'s labels (strings); None when the count is not published."""
        try:
            blocks, size = int(cache_config["num_gpu_blocks"]), int(cache_config["block_size"])
        except (KeyError, TypeError, ValueError):  # absent, or "None" (not yet profiled)
            return None
        return cls(blocks, size, engine) if blocks >= 1 and size >= 1 else None

    @classmethod
    def from_engine_facts(cls, facts: dict[str, Any]) -> KVCacheSize | None:
        """From run.json's `target.engine_facts` (runs recorded before the engine was kept there
        count every published block as usable)."""
        return cls.from_cache_config(facts.get("cache_config") or {}, str(facts.get("engine") or "unknown"))
