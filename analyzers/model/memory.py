"""Memory per GPU of a model under a serving plan, and the KV capacity that is left (docs/yardsticks.md).

vLLM's accounting, per GPU: it may use `gpu_memory_utilization` x total. Weights, the peak
activations of a profiling forward pass, non-torch memory (CUDA context, NCCL) and CUDA graphs
come off first; the KV cache gets the rest, in blocks of `block_size` tokens; a request needs
ceil(tokens / block_size) blocks, so max concurrency = blocks // ceil(max_model_len / block_size).

What is split how (the fullest GPU is the one reported; every GPU of a replica must fit):
- Linear weights split by TP; K/V projections hold max(1, kv_heads // TP) heads, so KV heads are
  replicated when TP exceeds them. Layers split by PP (the fullest stage has ceil(L / PP)).
  Embedding and lm_head are vocab-parallel over TP and live on the first / last PP stage (a tied
  embedding needs a copy on both when PP > 1). MoE experts split over the same GPUs (TP-sharded
  or EP-placed: the same bytes per GPU).
- Quantized weights (fp8/int8/int4) keep embeddings, lm_head and norms in 16-bit (what vLLM does);
  quantization scales (< 2% for int4 groups of 128) are ignored.
- KV per token per GPU = 2 x ceil(L / PP) x max(1, kv_heads // TP) x head_dim x kv bytes.

Estimates stated as assumptions (ASSUMPTIONS, printed by `llmdiag oom`):
- Activations: peak prefill of T = max_num_batched_tokens tokens in the compute dtype:
  the residual and the normed input (2 T h) plus the larger of attention (q, k, v and the output:
  T (2 q + 2 kv) head_dim) and the MLP (gate/up and the activated product: 3 T I / TP, x top-k for
  MoE); or, if larger, the sampler: one hidden row per token plus fp32 logits and probabilities of
  min(max_num_seqs, T) rows over the full vocabulary.
- Communication: an NCCL workspace per GPU when TP or PP > 1, plus one all-reduce buffer of
  T x hidden x dtype for TP (8192 x 2048 x FP16 = 32 MiB, the seed's figure) and a send and a
  receive buffer of the same size for PP.
- CUDA context (+ cuBLAS workspaces) and CUDA graphs: constants.
- Fragmentation headroom: a fraction of the transient peak (activations + comm buffers); the KV
  cache is one preallocated tensor, so fragmentation lives in the transient buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape

GiB = 1024**3
MiB = 1024**2
DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
}

CUDA_CONTEXT_BYTES = 512 * MiB  # CUDA context + cuBLAS workspaces (vLLM's "non-torch memory")
CUDA_GRAPH_BYTES = 512 * MiB  # vLLM's captured decode graphs; typically 0.2-1 GiB
NCCL_WORKSPACE_BYTES = 256 * MiB  # NCCL channels/proxy buffers (+ vLLM's custom all-reduce)
FRAGMENTATION_FRACTION = 0.10  # of the transient peak
HEADROOM = 0.20  # the seed's 20% margin on the computed concurrency
ASSUMPTIONS = (
    f"CUDA context + cuBLAS workspaces: {CUDA_CONTEXT_BYTES / GiB:.2f} GiB per GPU",
    f"CUDA graphs: {CUDA_GRAPH_BYTES / GiB:.2f} GiB per GPU (0 with --enforce-eager)",
    f"NCCL workspace: {NCCL_WORKSPACE_BYTES / GiB:.2f} GiB per GPU when TP or PP > 1",
    f"fragmentation headroom: {FRAGMENTATION_FRACTION:.0%} of activations + comm buffers",
    "activations: peak prefill of max_num_batched_tokens (hidden buffers + attention or MLP "
    "intermediates, or the sampler's fp32 logits of max_num_seqs rows)",
    "quantized weights keep embeddings, lm_head and norms in 16-bit; scales ignored",
    f"safe concurrency keeps {HEADROOM:.0%} of the computed maximum free (the seed's margin)",
)


def dtype_bytes(name: str) -> float:
    key = _DTYPE_ALIASES.get(name.lower(), name.lower())
    if key not in DTYPE_BYTES:
        raise DiagnosisError(f"unknown dtype {name!r}; use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class ServingPlan:
    """How one replica serves the model. `request_tokens`: prompt + output a typical request
    reaches (default max_model_len, the worst case vLLM sizes for)."""

    tp: int = 1
    pp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "auto"  # auto: 16-bit (vLLM's default whatever the weights)
    max_model_len: int = 4096
    concurrency: int = 32
    gpu_memory_gib: float = 80.0
    gpu_memory_utilization: float = 0.90
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    request_tokens: int | None = None
    cuda_graphs: bool = True
    kv_layout: str = "paged"  # or "contiguous": reserve max_model_len per request

    def __post_init__(self) -> None:
        checks = [
            (self.tp >= 1, "tp must be >= 1"),
            (self.pp >= 1, "pp must be >= 1"),
            (self.max_model_len >= 1, "max_model_len must be >= 1"),
            (self.concurrency >= 1, "concurrency must be >= 1"),
            (self.gpu_memory_gib > 0, "gpu memory must be > 0 GiB"),
            (0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (
                self.request_tokens is None or 1 <= self.request_tokens <= self.max_model_len,
                "request_tokens must be in [1, max_model_len]",
            ),
            (self.kv_layout in ("paged", "contiguous"), "kv_layout must be paged or contiguous"),
        ]
        for ok, message in checks:
            if not ok:
                raise DiagnosisError(message)
        dtype_bytes(self.weight_dtype)
        if self.kv_dtype != "auto":
            dtype_bytes(self.kv_dtype)

    @property
    def tokens_per_request(self) -> int:
        return self.request_tokens or self.max_model_len

    @property
    def weight_bytes(self) -> float:
        return dtype_bytes(self.weight_dtype)

    @property
    def compute_bytes(self) -> float:
        """Activations and the non-quantized parts: fp32 stays fp32, everything else runs in 16-bit."""
        return 4.0 if self.weight_bytes == 4.0 else 2.0

    @property
    def kv_bytes(self) -> float:
        return self.compute_bytes if self.kv_dtype == "auto" else dtype_bytes(self.kv_dtype)

    def with_(self, **changes) -> "ServingPlan":
        return replace(self, **changes)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU (the fullest GPU of a replica). The parts plus the KV budget plus what
    gpu_memory_utilization leaves out add up to the GPU's memory (checked)."""

    shape: ModelShape
    plan: ServingPlan
    total: float
    usable: float
    weights: float
    activations: float
    comm_buffers: float
    cuda_context: float
    cuda_graphs: float
    fragmentation: float
    kv_budget: float  # what is left for KV (negative: the model does not load)
    kv_bytes_per_token_gpu: float
    num_blocks: int

    def __post_init__(self) -> None:
        parts = self.non_kv + self.kv_budget + (self.total - self.usable)
        assert math.isclose(parts, self.total, rel_tol=1e-9), (parts, self.total)
        assert self.num_blocks >= 0

    @property
    def non_kv(self) -> float:
        return (
            self.weights
            + self.activations
            + self.comm_buffers
            + self.cuda_context
            + self.cuda_graphs
            + self.fragmentation
        )

    @property
    def block_bytes(self) -> float:
        return self.kv_bytes_per_token_gpu * self.plan.block_size

    @property
    def loads(self) -> bool:
        return self.kv_budget > 0

    def blocks_per_request(self, tokens: int) -> int:
        return -(-tokens // self.plan.block_size)

    def max_concurrency(self, tokens: int | None = None) -> int:
        """vLLM's figure: blocks // ceil(tokens / block_size); contiguous KV reserves max_model_len."""
        tokens = (
            self.plan.max_model_len if self.plan.kv_layout == "contiguous" else (tokens or self.plan.tokens_per_request)
        )
        return self.num_blocks // self.blocks_per_request(tokens)

    def safe_concurrency(self, tokens: int | None = None) -> int:
        return math.floor(self.max_concurrency(tokens) * (1 - HEADROOM))

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.plan.block_size

    @property
    def kv_needed(self) -> float:
        """KV the requested concurrency needs at tokens_per_request (reserved max_model_len if contiguous)."""
        tokens = self.plan.max_model_len if self.plan.kv_layout == "contiguous" else self.plan.tokens_per_request
        return self.plan.concurrency * self.blocks_per_request(tokens) * self.block_bytes

    @property
    def holds_one_request(self) -> bool:
        return self.num_blocks >= self.blocks_per_request(self.plan.max_model_len)

    @property
    def fits(self) -> bool:
        return self.loads and self.holds_one_request and self.plan.concurrency <= self.max_concurrency()

    @property
    def fits_with_headroom(self) -> bool:
        return self.fits and self.plan.concurrency <= self.safe_concurrency()


def kv_heads_per_gpu(shape: ModelShape, tp: int) -> int:
    """TP splits KV heads; beyond kv_heads every GPU keeps one (replicated TP / kv_heads times)."""
    return max(1, shape.num_kv_heads // tp)


def kv_bytes_per_token_per_gpu(shape: ModelShape, plan: ServingPlan) -> float:
    layers = -(-shape.num_layers // plan.pp)
    return 2 * layers * kv_heads_per_gpu(shape, plan.tp) * shape.head_dim * plan.kv_bytes


def validate_split(shape: ModelShape, plan: ServingPlan) -> None:
    if shape.num_heads % plan.tp:
        raise DiagnosisError(f"TP {plan.tp} does not divide {shape.name}'s {shape.num_heads} attention heads")
    kv = shape.num_kv_heads
    if kv % plan.tp and plan.tp % kv:
        raise DiagnosisError(f"TP {plan.tp} and {shape.name}'s {kv} KV heads: one must divide the other")
    if plan.pp > shape.num_layers:
        raise DiagnosisError(f"PP {plan.pp} exceeds {shape.name}'s {shape.num_layers} layers")


def weights_per_gpu(shape: ModelShape, plan: ServingPlan) -> float:
    """Bytes on the fullest GPU: the pipeline stage with the most layers plus its vocab matrices."""
    tp, hd, h = plan.tp, shape.head_dim, shape.hidden_size
    q_out = shape.num_heads * hd // tp
    kv_out = kv_heads_per_gpu(shape, tp) * hd
    attn = h * (q_out + 2 * kv_out) + q_out * h
    mlp = shape.num_experts * 3 * h * shape.intermediate_size / tp
    high_precision = 2 * h + (h * shape.num_experts if shape.is_moe else 0)  # norms, router
    if shape.qkv_bias:
        high_precision += q_out + 2 * kv_out
    layers = -(-shape.num_layers // plan.pp)
    vocab_matrix = shape.vocab_size * h / tp
    if plan.pp == 1:
        vocab = vocab_matrix * (1 if shape.tie_word_embeddings else 2) + h
    else:
        vocab = vocab_matrix + h  # first stage: embedding; last: lm_head (or a tied copy) + norm
    return (
        layers * ((attn + mlp) * plan.weight_bytes + high_precision * plan.compute_bytes) + vocab * plan.compute_bytes
    )


def activations_per_gpu(shape: ModelShape, plan: ServingPlan) -> float:
    t, b, h, hd, tp = plan.max_num_batched_tokens, plan.compute_bytes, shape.hidden_size, shape.head_dim, plan.tp
    q = shape.num_heads // tp
    kv = kv_heads_per_gpu(shape, tp)
    attention = t * (2 * q + 2 * kv) * hd * b
    mlp = 3 * t * shape.experts_per_token * shape.intermediate_size / tp * b
    layer_peak = 2 * t * h * b + max(attention, mlp)
    sampler = t * h * b + 2 * min(plan.max_num_seqs, t) * shape.vocab_size * 4
    return max(layer_peak, sampler)


def allreduce_bytes(shape: ModelShape, plan: ServingPlan) -> float:
    """One TP all-reduce of the step's hidden states: tokens x hidden x dtype."""
    return plan.max_num_batched_tokens * shape.hidden_size * plan.compute_bytes


def comm_buffers_per_gpu(shape: ModelShape, plan: ServingPlan) -> float:
    if plan.tp == 1 and plan.pp == 1:
        return 0.0
    one = allreduce_bytes(shape, plan)
    return NCCL_WORKSPACE_BYTES + (one if plan.tp > 1 else 0) + (2 * one if plan.pp > 1 else 0)


def estimate_memory(shape: ModelShape, plan: ServingPlan) -> MemoryEstimate:
    validate_split(shape, plan)
    total = plan.gpu_memory_gib * GiB
    usable = total * plan.gpu_memory_utilization
    activations = activations_per_gpu(shape, plan)
    comm = comm_buffers_per_gpu(shape, plan)
    parts = dict(
        weights=weights_per_gpu(shape, plan),
        activations=activations,
        comm_buffers=comm,
        cuda_context=float(CUDA_CONTEXT_BYTES),
        cuda_graphs=float(CUDA_GRAPH_BYTES if plan.cuda_graphs else 0),
        fragmentation=FRAGMENTATION_FRACTION * (activations + comm),
    )
    kv_budget = usable - sum(parts.values())
    per_token = kv_bytes_per_token_per_gpu(shape, plan)
    blocks = max(0, math.floor(kv_budget / (per_token * plan.block_size)))
    return MemoryEstimate(
        shape=shape,
        plan=plan,
        total=total,
        usable=usable,
        kv_budget=kv_budget,
        kv_bytes_per_token_gpu=per_token,
        num_blocks=blocks,
        **parts,
    )
