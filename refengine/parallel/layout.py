"""The parallel layout: how many ranks, which rank is which, and whether the model can be split so.

Rank numbering (as vLLM and Megatron do it): rank = pp_rank x tp + tp_rank. The TP ranks of a
stage are adjacent (on one machine they share the fast links); stage s holds layers
[start, end) of a contiguous partition. Rank 0 is the driver: it runs the scheduler (and, with
the server, the HTTP front end); the sampler runs on the first TP rank of the last stage.

Expert parallelism reuses the TP ranks of a stage (vLLM's EP size = TP x DP with DP 1 here):
attention stays tensor-parallel, whole experts are placed on the ranks.

`validate_layout` runs before any weight is read, so a bad layout costs a one-line message, not
minutes of loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from refengine.errors import RefEngineError

BACKENDS = ("auto", "gloo", "nccl")
MOE_DISPATCH = ("auto", "all_to_all", "allgather")
PIPELINE_SCHEDULES = ("auto", "batch-queue", "micro-batch")


def resolve_pipeline_schedule(schedule: str, micro_batches: int | None, device_type: str) -> tuple[str, int | None]:
    """(schedule, micro-batches) the engine runs. auto: the micro-batch schedule where a micro-batch
    count was asked for (only it uses one); else, on CPU, the stages taking turns (one micro-batch:
    the ranks share the host's cores and memory, and the overlap the batch queue buys does not pay
    for its two half-size batches: docs/distributed.md); else the batch queue (each stage a device
    of its own)."""
    if schedule not in PIPELINE_SCHEDULES:
        raise RefEngineError(f"pipeline_schedule must be one of {PIPELINE_SCHEDULES}, got {schedule!r}")
    if schedule != "auto":
        return schedule, micro_batches
    if micro_batches is not None:
        return "micro-batch", micro_batches
    return ("micro-batch", 1) if device_type == "cpu" else ("batch-queue", None)


@dataclass(frozen=True)
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    layer_partition: tuple[int, ...] | None = None  # layers per stage; None = balanced
    micro_batches: int | None = None  # None = pipeline_parallel_size
    schedule: str = "micro-batch"  # PP overlap: "batch-queue" (across steps) or "micro-batch"
    enable_expert_parallel: bool = False
    moe_capacity_factor: float = 0.0  # dropless
    moe_dispatch: str = "auto"
    backend: str = "auto"
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise RefEngineError("tensor_parallel_size and pipeline_parallel_size must be >= 1")
        if self.micro_batches is not None and self.micro_batches < 1:
            raise RefEngineError("pipeline_micro_batches must be >= 1")
        if self.schedule not in PIPELINE_SCHEDULES[1:]:
            raise RefEngineError(f"pipeline_schedule must be one of {PIPELINE_SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "batch-queue" and self.micro_batches is not None:
            raise RefEngineError(
                "pipeline_micro_batches splits steps under pipeline_schedule='micro-batch'; the "
                "batch queue overlaps whole batches instead: drop one of the two"
            )
        if self.backend not in BACKENDS:
            raise RefEngineError(f"distributed_backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.moe_dispatch not in MOE_DISPATCH:
            raise RefEngineError(f"moe_dispatch must be one of {MOE_DISPATCH}, got {self.moe_dispatch!r}")
        if self.moe_capacity_factor < 0:
            raise RefEngineError("moe_capacity_factor must be >= 0 (0: no capacity limit)")
        if self.timeout_s <= 0:
            raise RefEngineError("distributed_timeout_s must be positive")

    @classmethod
    def from_engine_args(cls, args, device_type: str) -> "ParallelConfig":
        """`device_type` ("cpu" or "cuda", as resolved) picks what `pipeline_schedule="auto"` means."""
        partition = None
        if args.pipeline_layer_partition:
            try:
                partition = tuple(int(x) for x in str(args.pipeline_layer_partition).split(","))
            except ValueError:
                raise RefEngineError(
                    f"pipeline_layer_partition must be comma-separated integers, got {args.pipeline_layer_partition!r}"
                ) from None
        schedule, micro_batches = resolve_pipeline_schedule(
            args.pipeline_schedule, args.pipeline_micro_batches, device_type
        )
        return cls(
            tensor_parallel_size=args.tensor_parallel_size,
            pipeline_parallel_size=args.pipeline_parallel_size,
            layer_partition=partition,
            micro_batches=micro_batches,
            schedule=schedule,
            enable_expert_parallel=args.enable_expert_parallel,
            moe_capacity_factor=args.moe_capacity_factor,
            moe_dispatch=args.moe_dispatch,
            backend=args.distributed_backend,
            timeout_s=args.distributed_timeout_s,
        )

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def num_micro_batches(self) -> int:
        return self.micro_batches or self.pipeline_parallel_size

    @property
    def batches_in_flight(self) -> int:
        """Scheduled batches the engine keeps in the pipeline at once: PP under the batch queue, else 1."""
        return self.pipeline_parallel_size if self.schedule == "batch-queue" else 1

    @property
    def uses_micro_batches(self) -> bool:
        return self.pipeline_parallel_size > 1 and self.batches_in_flight == 1

    def resolve_backend(self, device_type: str) -> str:
        if self.backend != "auto":
            return self.backend
        return "nccl" if device_type == "cuda" else "gloo"

    def stage_layers(self, num_layers: int) -> list[tuple[int, int]]:
        """[start, end) per stage: the given partition, or balanced with any remainder on the
        earliest stages (the last stage already carries the final norm, LM head and sampler)."""
        pp = self.pipeline_parallel_size
        if self.layer_partition is not None:
            counts = list(self.layer_partition)
        else:
            base, extra = divmod(num_layers, pp)
            counts = [base + (1 if i < extra else 0) for i in range(pp)]
        ranges, start = [], 0
        for c in counts:
            ranges.append((start, start + c))
            start += c
        return ranges

    def rank_info(self, rank: int) -> "RankInfo":
        tp, pp = self.tensor_parallel_size, self.pipeline_parallel_size
        return RankInfo(rank=rank, world_size=tp * pp, tp_rank=rank % tp, tp_size=tp, pp_rank=rank // tp, pp_size=pp)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int

    @property
    def is_driver(self) -> bool:
        return self.rank == 0

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def samples(self) -> bool:
        """The one rank that samples: TP rank 0 of the last stage."""
        return self.is_last_stage and self.tp_rank == 0

    def stage_rank(self, pp_rank: int) -> int:
        """Global rank of this rank's TP peer in stage `pp_rank`."""
        return pp_rank * self.tp_size + self.tp_rank

    @property
    def sampler_rank(self) -> int:
        return (self.pp_size - 1) * self.tp_size


def validate_layout(model_config, pc: ParallelConfig) -> None:
    """Raise RefEngineError, naming the numbers, if the model cannot be split this way."""
    tp, pp = pc.tensor_parallel_size, pc.pipeline_parallel_size
    c = model_config
    where = f"tensor_parallel_size={tp}"
    if c.num_attention_heads % tp:
        raise RefEngineError(
            f"num_attention_heads ({c.num_attention_heads}) is not divisible by {where}; "
            f"use a divisor of {c.num_attention_heads}"
        )
    kv = c.num_key_value_heads
    if tp % kv if tp >= kv else kv % tp:
        raise RefEngineError(
            f"num_key_value_heads ({kv}) and {where} must divide one another "
            "(KV heads are split, or replicated when there are fewer than ranks)"
        )
    if c.vocab_size < tp:
        raise RefEngineError(f"vocab_size ({c.vocab_size}) is smaller than {where}")
    num_experts = getattr(c, "num_experts", 0) or 0
    if num_experts and pc.enable_expert_parallel:
        if num_experts % tp:
            raise RefEngineError(
                f"num_local_experts ({num_experts}) is not divisible by the expert-parallel size "
                f"({tp} = {where}); use a divisor of {num_experts}"
            )
    elif c.intermediate_size % tp:
        raise RefEngineError(f"intermediate_size ({c.intermediate_size}) is not divisible by {where}")
    if pc.enable_expert_parallel and not num_experts:
        raise RefEngineError(
            f"enable_expert_parallel needs a mixture-of-experts model; {c.architecture} has no experts"
        )
    layers = c.num_hidden_layers
    if pc.layer_partition is not None:
        part = pc.layer_partition
        if len(part) != pp or sum(part) != layers or min(part) < 1:
            raise RefEngineError(
                f"pipeline_layer_partition {','.join(map(str, part))} must list {pp} positive layer "
                f"counts summing to num_hidden_layers ({layers})"
            )
    elif layers < pp:
        raise RefEngineError(
            f"pipeline_parallel_size={pp} exceeds num_hidden_layers ({layers}); every stage needs at least one layer"
        )


@dataclass(frozen=True)
class PipelineStage:
    """The layers one pipeline stage runs, and whether it embeds (first) or owns the head (last)."""

    start_layer: int
    end_layer: int
    is_first: bool = True
    is_last: bool = True

    @classmethod
    def whole(cls, num_layers: int) -> "PipelineStage":
        return cls(0, num_layers, True, True)

    @property
    def num_layers(self) -> int:
        return self.end_layer - self.start_layer
