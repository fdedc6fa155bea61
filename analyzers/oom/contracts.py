"""The OOM explainer's contract: one OomFinding per recognised message, with the numbers it
carried, what they mean and what to change; sizes as the messages print them."""

from __future__ import annotations

from dataclasses import dataclass, field

GiB = 1024**3
_UNITS = {
    "b": 1,
    "bytes": 1,
    "kib": 1024,
    "kb": 1024,
    "mib": 1024**2,
    "mb": 1024**2,
    "gib": 1024**3,
    "gb": 1024**3,
    "tib": 1024**4,
}
SIZE = r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB)"


def size_bytes(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit.lower()]


def gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


@dataclass
class OomFinding:
    # torch_oom, cuda_error_oom, vllm_kv_too_small, vllm_no_kv_blocks, vllm_preemption, vllm_startup_free_memory,
    # vllm_sampler_warmup, sglang_kv_pool, sglang_req_slots, tgi_warmup_prefill, cublas_alloc_failed, nccl_oom
    kind: str
    wording: str  # which version of the message
    excerpt: str  # the matched text
    numbers: dict[str, float] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
