"""The engine a prediction simulates: refengine's EngineArgs from `llmbench serve` flags (as run.json
records them), with --what-if variations, resolved into the Scheduler's and KV cache's configs.

The KV block count is the engine's own where the run recorded it (run.json's engine facts, from
/metrics), else the engine's rule (refengine/distributed/worker.py: the per-rank budget over the
bytes one block costs on the widest stage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from refengine.config import CacheConfig, EngineArgs, SchedulerConfig
from refengine.distributed.worker import DEFAULT_KV_CACHE_BYTES_CPU
from refengine.errors import RefEngineError
from refengine.parallel.layout import ParallelConfig


@dataclass(frozen=True)
class EngineSetup:
    args: EngineArgs
    scheduler: SchedulerConfig
    cache: CacheConfig
    tp: int
    pp: int
    batches_in_flight: int  # the pipeline's depth, as the engine's schedule resolves it (1 without PP)
    notes: tuple[str, ...] = ()


def engine_args_from_flags(model: str, flags: list[str]) -> EngineArgs:
    """EngineArgs from `llmbench serve` flags, parsed by the server's own parser."""
    from refengine.server.cli import build_parser, engine_args_from

    parser = build_parser()
    try:
        ns = parser.parse_args(["--model", model, *flags])
    except SystemExit:
        raise DiagnosisError(f"the run's engine flags do not parse: {' '.join(flags)}") from None
    try:
        return engine_args_from(ns)
    except RefEngineError as exc:
        raise DiagnosisError(f"the run's engine flags: {exc}") from None


def _coerce(field: dataclasses.Field, text: str):
    kind = str(field.type)
    if "bool" in kind:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise DiagnosisError(f"--what-if {field.name}: expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    try:
        if "int" in kind:
            return None if text.lower() == "none" and "None" in kind else int(text)
        if "float" in kind:
            return float(text)
    except ValueError:
        raise DiagnosisError(f"--what-if {field.name}: expected a number, got {text!r}") from None
    return text


def parse_what_if(text: str) -> dict:
    """'max_num_seqs=64,enable_chunked_prefill=false' -> {name: typed value} of EngineArgs fields."""
    fields = {f.name: f for f in dataclasses.fields(EngineArgs)}
    out: dict = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not value.strip():
            raise DiagnosisError(f"--what-if takes name=value pairs separated by commas, got {item!r}")
        if name not in fields or name == "model":
            raise DiagnosisError(
                f"--what-if: unknown engine argument {name!r}; e.g. max_num_seqs, "
                "max_num_batched_tokens, enable_chunked_prefill, tensor_parallel_size"
            )
        out[name] = _coerce(fields[name], value.strip())
    if not out:
        raise DiagnosisError("--what-if is empty; give name=value pairs such as max_num_seqs=64")
    return out


def with_changes(args: EngineArgs, changes: dict) -> EngineArgs:
    try:
        return dataclasses.replace(args, **changes)
    except RefEngineError as exc:
        raise DiagnosisError(f"--what-if: {exc}") from None


def resolve_engine(
    args: EngineArgs,
    shape: ModelShape,
    kv_bytes_per_element: int,
    device_type: str,
    recorded_blocks: int | None = None,
) -> EngineSetup:
    """The configs the engine would resolve from these arguments, for this model, on `device_type`
    ("cpu" or "cuda": what `--pipeline-schedule auto` means there)."""
    notes: list[str] = []
    max_len = args.max_model_len or shape.max_position_embeddings
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if args.quantization == "fp8" or args.kv_cache_dtype == "fp8":
        notes.append("fp8: priced at the profile's compute dtype (no FP8 speed-up modelled)")
    depth, schedule_note = pipeline_depth(args, device_type)
    notes += [schedule_note] if schedule_note else []
    if args.batching == "static" or args.kv_layout == "contiguous":
        notes.append("static batching / contiguous KV: the scheduler's own ablation modes, simulated as they run")
    try:
        sched = args.scheduler_config(max_len)
        blocks = recorded_blocks or args.num_gpu_blocks_override or _blocks(args, shape, kv_bytes_per_element)
        cache = CacheConfig(
            block_size=args.block_size,
            num_blocks=blocks,
            enable_prefix_caching=args.enable_prefix_caching and args.kv_layout == "paged",
            kv_layout=args.kv_layout,
        )
    except RefEngineError as exc:
        raise DiagnosisError(str(exc)) from None
    if cache.num_blocks * cache.block_size < max_len:
        raise DiagnosisError(
            f"the KV cache ({cache.num_blocks} blocks of {cache.block_size}) does not hold one "
            f"request of max_model_len {max_len}"
        )
    return EngineSetup(
        args=args, scheduler=sched, cache=cache, tp=tp, pp=pp, batches_in_flight=depth, notes=tuple(notes)
    )


def pipeline_depth(args: EngineArgs, device_type: str) -> tuple[int, str | None]:
    """Batches the simulator keeps in the pipeline at once, from the engine's own resolution of the
    schedule on `device_type`: PP under the batch queue, 1 when the stages take turns (and without
    PP); and a note where the simulation approximates the schedule."""
    try:
        parallel = ParallelConfig.from_engine_args(args, device_type)
    except RefEngineError as exc:
        raise DiagnosisError(str(exc)) from None
    if parallel.uses_micro_batches and parallel.num_micro_batches > 1:
        return parallel.pipeline_parallel_size, (
            "PP micro-batch schedule simulated as the batch queue (both keep PP batches in the pipeline)"
        )
    return parallel.batches_in_flight, None


def _blocks(args: EngineArgs, shape: ModelShape, kv_bytes: int) -> int:
    elem = 1 if args.kv_cache_dtype == "fp8" else kv_bytes
    layers = -(-shape.num_layers // args.pipeline_parallel_size)
    kv_heads = max(1, shape.num_kv_heads // args.tensor_parallel_size)
    per_block = 2 * layers * args.block_size * kv_heads * shape.head_dim * elem
    return max(1, (args.kv_cache_memory_bytes or DEFAULT_KV_CACHE_BYTES_CPU) // per_block)
