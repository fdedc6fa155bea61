"""Engine arguments (vLLM's names) and the two derived configs the core consumes.

`EngineArgs` is what a user passes (`LLM(model=..., **engine_args)`, `llmbench serve --flag`).
`SchedulerConfig` and `CacheConfig` are the resolved, validated pieces the scheduler and the KV
cache manager see; they hold plain integers so the core stays testable without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from refengine.errors import RefEngineError

POLICIES = ("fcfs", "priority", "sjf")
KV_LAYOUTS = ("paged", "contiguous")
BATCHING_MODES = ("continuous", "static")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class SchedulerConfig:
    """Resolved scheduler knobs (all token counts are integers)."""

    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    max_model_len: int = 2048
    enable_chunked_prefill: bool = True
    # Cap on the tokens one request may prefill in one step (vLLM: long_prefill_token_threshold);
    # 0 means no cap beyond the step's token budget.
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    # SJF aging: a waiting request's effective length shrinks by this many tokens per second
    # waited, so a long prompt beats any fresh shorter one after (len_long - len_short) / rate s.
    sjf_aging_tokens_per_s: float = 256.0
    # Admission watermark: a waiting request is admitted only if this fraction of all KV blocks
    # stays free afterwards, leaving running requests room to grow before anyone is preempted.
    watermark: float = 0.01
    batching: str = "continuous"

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise RefEngineError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise RefEngineError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_model_len < 2:
            raise RefEngineError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise RefEngineError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                f"({self.max_model_len}) with chunked prefill off, so long prompts could never be scheduled; "
                "raise max_num_batched_tokens, lower max_model_len, or enable chunked prefill"
            )
        if self.long_prefill_token_threshold < 0:
            raise RefEngineError("long_prefill_token_threshold must be >= 0 (0 disables the cap)")
        if self.policy not in POLICIES:
            raise RefEngineError(f"scheduling_policy must be one of {POLICIES}, got {self.policy!r}")
        if self.batching not in BATCHING_MODES:
            raise RefEngineError(f"batching must be one of {BATCHING_MODES}, got {self.batching!r}")
        if not 0 <= self.watermark < 1:
            raise RefEngineError(f"watermark must be in [0, 1), got {self.watermark}")
        if self.sjf_aging_tokens_per_s < 0:
            raise RefEngineError("sjf_aging_tokens_per_s must be >= 0")


@dataclass
class CacheConfig:
    """Resolved KV cache layout: how many blocks of how many tokens."""

    block_size: int = 16
    num_blocks: int = 1024
    enable_prefix_caching: bool = True
    kv_layout: str = "paged"

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise RefEngineError(f"block_size must be >= 1, got {self.block_size}")
        if self.num_blocks < 1:
            raise RefEngineError(f"the KV cache must hold at least one block, got {self.num_blocks}")
        if self.kv_layout not in KV_LAYOUTS:
            raise RefEngineError(f"kv_layout must be one of {KV_LAYOUTS}, got {self.kv_layout!r}")


def _arg(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class EngineArgs:
    """Everything a user can set, with vLLM's names where vLLM has one. The help texts feed
    the `serve` command line, so a flag and its documentation cannot drift apart."""

    model: str = _arg("tiny", "Built-in preset (tiny, tiny-test) or a Hugging Face model directory.")
    tokenizer: str | None = _arg(None, "Directory with tokenizer.json if not the model's own.")
    dtype: str = _arg(
        "auto", "Weights and activations: auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16."
    )
    device: str = _arg("auto", "auto (cuda when visible), cpu or cuda.")
    seed: int = _arg(0, "Seed of the default sampling generator.")
    max_model_len: int | None = _arg(
        None, "Longest prompt + output in tokens (default: the model's max_position_embeddings)."
    )
    max_num_seqs: int = _arg(128, "Most requests running at once.")
    max_num_batched_tokens: int | None = _arg(
        None, "Token budget per step (default 2048 with chunked prefill, else max(max_model_len, 2048))."
    )
    block_size: int = _arg(16, "Tokens per KV cache block.")
    enable_prefix_caching: bool = _arg(True, "Reuse KV blocks of shared prompt prefixes.")
    enable_chunked_prefill: bool = _arg(True, "Split long prompts across steps so decodes keep flowing.")
    long_prefill_token_threshold: int = _arg(0, "Cap on one request's prefill tokens per step (0: no cap).")
    scheduling_policy: str = _arg(
        "fcfs", "fcfs, priority (lower value first) or sjf (shortest remaining prompt first, with aging)."
    )
    sjf_aging_tokens_per_s: float = _arg(
        256.0, "SJF aging: tokens of effective length a waiting request loses per second waited."
    )
    watermark: float = _arg(0.01, "Fraction of KV blocks that must stay free when admitting a request.")
    # KV budget: bytes (like vLLM's kv_cache_memory_bytes) or a block count (num_gpu_blocks_override).
    kv_cache_memory_bytes: int | None = _arg(None, "KV cache budget in bytes (default 1 GiB).")
    num_gpu_blocks_override: int | None = _arg(None, "KV cache budget as a number of blocks (wins over bytes).")
    # Ablations that exist only to measure what paging and continuous batching buy.
    kv_layout: str = _arg("paged", "paged, or contiguous (reserve max_model_len per request; ablation only).")
    batching: str = _arg("continuous", "continuous, or static (no admission until the batch finishes; ablation only).")
    # FP8 (refengine/quant; docs/quantization.md).
    quantization: str | None = _arg(
        None,
        "Weight quantization: fp8 (E4M3, quantized at load time; an FP8 "
        "checkpoint is detected from config.json). Default: none.",
    )
    fp8_weight_scales: str = _arg(
        "channel",
        "FP8 weight scales when quantizing at load time: channel (one per output row) or block (128x128 tiles).",
    )
    quantization_skip: str | None = _arg(
        None,
        "Comma-separated modules to keep unquantized besides lm_head, "
        "embeddings, norms and MoE routers (e.g. qkv_proj,o_proj; 'seed' = "
        "qkv_proj, the seed article's fix).",
    )
    kv_cache_dtype: str = _arg(
        "auto", "KV cache storage: auto (the model dtype) or fp8 (E4M3 with per-layer K/V scales; 1 byte per element)."
    )
    calculate_kv_scales: bool = _arg(
        False,
        "With an fp8 KV cache: measure per-layer K/V scales (amax / 448) "
        "on a few built-in prompts at start-up instead of using 1.0.",
    )
    # Parallelism (refengine/distributed; docs/distributed.md). rank = pp_rank * tp + tp_rank.
    tensor_parallel_size: int = _arg(
        1, "Tensor-parallel ranks (heads, MLP and vocab split; one all-reduce per attention and MLP block)."
    )
    pipeline_parallel_size: int = _arg(1, "Pipeline stages (contiguous layer ranges; activations sent between stages).")
    pipeline_layer_partition: str | None = _arg(
        None, "Layers per stage, comma-separated (e.g. 3,5); default: balanced."
    )
    pipeline_micro_batches: int | None = _arg(
        None,
        "Micro-batches a step is split into so stages overlap, under "
        "the micro-batch schedule (default: pipeline_parallel_size).",
    )
    pipeline_schedule: str = _arg(
        "auto",
        "How pipeline stages overlap: batch-queue (vLLM's: up to "
        "pipeline_parallel_size scheduled batches in flight across steps), "
        "micro-batch (each step split into pipeline_micro_batches), or auto: "
        "micro-batch if pipeline_micro_batches is set; else, on CPU, the "
        "stages take turns (one micro-batch: ranks sharing a host's cores "
        "gain nothing from overlap); else batch-queue.",
    )
    enable_expert_parallel: bool = _arg(
        False,
        "MoE: place whole experts across the tensor-parallel ranks "
        "(all-to-all dispatch) instead of sharding every expert.",
    )
    moe_capacity_factor: float = _arg(
        0.0,
        "MoE: 0 (default) is dropless, as vLLM and transformers infer; f > 0 "
        "caps an expert at ceil(f x tokens x top_k / experts) assignments per "
        "step, dropping and counting the overflow (a demonstration).",
    )
    moe_dispatch: str = _arg(
        "auto", "MoE expert-parallel dispatch: all_to_all, allgather, or auto (all_to_all where the backend has it)."
    )
    distributed_backend: str = _arg(
        "auto", "torch.distributed backend: auto (nccl on CUDA, gloo on CPU), gloo or nccl."
    )
    distributed_timeout_s: float = _arg(
        30.0, "Seconds a collective inside a step may wait before the engine fails (a dead rank is noticed at once)."
    )

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise RefEngineError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise RefEngineError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise RefEngineError("kv_cache_memory_bytes must be positive")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override <= 0:
            raise RefEngineError("num_gpu_blocks_override must be positive")

    @classmethod
    def from_kwargs(cls, model: str, **kwargs) -> "EngineArgs":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise RefEngineError(f"unknown engine argument(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(model=model, **kwargs)

    def scheduler_config(self, max_model_len: int) -> SchedulerConfig:
        budget = self.max_num_batched_tokens
        if budget is None:
            # vLLM's defaults: a modest budget with chunking, whole prompts without it.
            budget = 2048 if self.enable_chunked_prefill else max(max_model_len, 2048)
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=budget,
            max_model_len=max_model_len,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            policy=self.scheduling_policy,
            sjf_aging_tokens_per_s=self.sjf_aging_tokens_per_s,
            watermark=self.watermark,
            batching=self.batching,
        )
