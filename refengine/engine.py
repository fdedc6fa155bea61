"""LLMEngine: builds the model, the KV cache and the scheduler, and runs the step loop.

One step = schedule → execute on the executor → update the scheduler → detokenize.
Everything a user can get wrong is checked here, before a request reaches the core (the
parallel layout too, before any weight is read).

The executor runs the model: in this process (`UniprocExecutor`), or with tensor/pipeline
parallelism on all ranks (`DistributedExecutor`: this process is rank 0, the driver; see
refengine/distributed and docs/distributed.md). `self.runner` is the driver's own ModelRunner.
Under pipeline parallelism with `pipeline_schedule="batch-queue"` a step goes through the
`BatchQueue` instead: up to PP batches in flight, and a step returns the outputs of the oldest
batch when it lands (or nothing, while the pipeline fills).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import torch

from refengine.config import CacheConfig, EngineArgs
from refengine.core.scheduler import Scheduler
from refengine.device import resolve_device_setup
from refengine.distributed.batch_queue import BatchQueue
from refengine.distributed.executor import DistributedExecutor, UniprocExecutor
from refengine.distributed.worker import WorkerSpec, kv_blocks_for
from refengine.errors import RefEngineError, RequestFailedError, StepFailedError
from refengine.model.hf_config import load_model_config
from refengine.model.layers.attention import allocate_kv_caches
from refengine.model.layers.moe import MoEParallel
from refengine.model.loader import load_model
from refengine.model.tiny import resolve_model
from refengine.output_processor import OutputProcessor
from refengine.outputs import RequestOutput
from refengine.parallel.layout import ParallelConfig, validate_layout
from refengine.quant.engine_setup import finish_quantized_model
from refengine.request import Request, RequestStatus
from refengine.runner.host_tuning import keep_freed_memory_on_heap
from refengine.runner.model_runner import ModelRunner
from refengine.sampling_params import SamplingParams
from refengine.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


@dataclass
class EngineStats:
    """Live counters for the server's /metrics (vLLM semantics: prefix counts are in tokens)."""

    num_running: int
    num_waiting: int
    kv_usage: float
    num_blocks: int
    block_size: int
    num_preemptions_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prompt_tokens_total: int
    generation_tokens_total: int
    tokens_processed_total: int
    num_steps: int
    # MoE models: tokens routed to each expert (summed over layers) and assignments dropped by
    # the capacity factor; empty / 0 for dense models.
    moe_expert_tokens: tuple = ()
    moe_overflow_total: int = 0


class LLMEngine:
    def __init__(self, args: EngineArgs):
        self.args = args
        self.model_dir = resolve_model(args.model)
        self.model_config = load_model_config(self.model_dir)
        self.tokenizer = load_tokenizer(self.model_dir if args.tokenizer is None else resolve_model(args.tokenizer))
        setup = resolve_device_setup(args, self.model_dir)
        self.device, self.dtype, self.quant, self.kv_cache_dtype = (
            setup.device,
            setup.dtype,
            setup.quant,
            setup.kv_cache_dtype,
        )
        self.max_model_len = self._resolve_max_model_len()
        self.parallel_config = ParallelConfig.from_engine_args(args, self.device.type)
        validate_layout(self.model_config, self.parallel_config)
        self.scheduler_config = args.scheduler_config(self.max_model_len)
        self.cache_config = CacheConfig(
            block_size=args.block_size,
            num_blocks=self.num_kv_blocks(),
            enable_prefix_caching=args.enable_prefix_caching and args.kv_layout == "paged",
            kv_layout=args.kv_layout,
        )
        self._check_kv_holds_one_request()
        torch.manual_seed(args.seed)
        if self.device.type == "cpu":
            keep_freed_memory_on_heap()
        self.executor = self._make_executor()
        self.runner = self.executor.runner  # the driver's own runner
        depth = self.parallel_config.batches_in_flight
        self.scheduler = Scheduler(self.scheduler_config, self.cache_config, max_batches_in_flight=depth)
        self.batch_queue = BatchQueue(self.scheduler, self.executor, depth) if depth > 1 else None
        self.outputs = OutputProcessor(self.tokenizer)
        self._ids = itertools.count()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.tokens_processed_total = 0  # every token a forward pass computed, recompute included
        self.num_steps = 0

    # ----- configuration -------------------------------------------------------------------
    def _resolve_max_model_len(self) -> int:
        limit = self.model_config.max_position_embeddings
        if self.args.max_model_len is None:
            return limit
        if self.args.max_model_len > limit:
            raise RefEngineError(
                f"max_model_len={self.args.max_model_len} exceeds the model's max_position_embeddings ({limit}); "
                f"use max_model_len <= {limit}"
            )
        return self.args.max_model_len

    def num_kv_blocks(self, kv_dtype: torch.dtype | None = None) -> int:
        """Blocks in the KV budget at the cache's real element size (FP8: 1 byte). The budget is per
        rank; with TP/PP a rank holds only its layers and KV heads, so it buys more blocks."""
        return kv_blocks_for(self.args, self.model_config, self.parallel_config, kv_dtype or self.kv_cache_dtype)

    def _moe_parallel(self):
        pc = self.parallel_config
        return MoEParallel(capacity_factor=pc.moe_capacity_factor, dispatch=pc.moe_dispatch)

    def _make_executor(self):
        args = self.args
        if self.parallel_config.world_size == 1:
            extra = {"moe": self._moe_parallel()} if self.model_config.num_experts else {}
            model = load_model(
                self.model_dir, self.model_config, self.dtype, self.device, quantization=self.quant, **extra
            )
            kv_caches = allocate_kv_caches(
                self.model_config, self.cache_config.num_blocks, args.block_size, self.kv_cache_dtype, self.device
            )
            self.quant_memory = finish_quantized_model(self, model)  # FP8 KV calibration, bytes saved, policy log
            return UniprocExecutor(ModelRunner(model, kv_caches, args.block_size, self.device, args.seed))
        if args.calculate_kv_scales:
            raise RefEngineError(
                "calculate_kv_scales runs in one process only; drop it or use "
                "tensor_parallel_size=pipeline_parallel_size=1"
            )
        spec = WorkerSpec(
            args,
            str(self.model_dir),
            self.dtype,
            self.device.type,
            self.cache_config.num_blocks,
            quant=self.quant,
            kv_cache_dtype=self.kv_cache_dtype,
        )
        executor = DistributedExecutor(spec, self.model_config, self.parallel_config)
        self.quant_memory = finish_quantized_model(self, executor.runner.model)  # the driver's shard
        return executor

    def shutdown(self) -> None:
        """Stop the other ranks (a no-op for a one-process engine)."""
        self.executor.shutdown()

    @property
    def healthy(self) -> bool:
        """False once a rank has died (the executor says why in `executor.dead_reason`)."""
        return self.executor.healthy

    def _check_kv_holds_one_request(self) -> None:
        need = -(-self.max_model_len // self.args.block_size)
        have = self.cache_config.num_blocks
        if have < need:
            raise RefEngineError(
                f"the KV cache has {have} blocks ({have * self.args.block_size} tokens) but one request of "
                f"max_model_len={self.max_model_len} needs {need} blocks; lower max_model_len to "
                f"{have * self.args.block_size} or raise the KV budget (kv_cache_memory_bytes / num_gpu_blocks_override)"
            )

    # ----- requests ------------------------------------------------------------------------
    def encode_prompt(self, prompt: str | list[int]) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RefEngineError(f"model {self.args.model!r} has no tokenizer.json; pass token ids instead of text")
            return prompt, self.tokenizer.encode(prompt)
        ids = [int(t) for t in prompt]
        vocab = self.model_config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise RefEngineError(f"prompt token ids must be in [0, {vocab}); got {bad[:5]}")
        return None, ids

    def check_prompt_length(self, ids: list[int]) -> None:
        """Raise if the prompt is empty or leaves no room to generate (thread-safe: reads config only)."""
        if not ids:
            raise RefEngineError("the prompt is empty; send at least one token")
        if len(ids) >= self.max_model_len:
            raise RefEngineError(
                f"the prompt has {len(ids)} tokens but max_model_len is {self.max_model_len} (room is needed for "
                f"at least one generated token); shorten the prompt or raise max_model_len"
            )

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
    ) -> str:
        """arrival_time (time.monotonic()): when the request reached the server; default now. The
        server passes the moment it admitted the request, so its queue time includes the wait for
        the engine thread to take it in (a step may be running)."""
        params = params or SamplingParams()
        text, ids = self.encode_prompt(prompt)
        self.check_prompt_length(ids)
        request_id = request_id if request_id is not None else str(next(self._ids))
        eos = None if self.tokenizer is None else self.tokenizer.eos_token_id
        if eos is None:
            eos = self.model_config.eos_token_id
        request = Request(request_id, ids, params, eos_token_id=eos, priority=priority, arrival_time=arrival_time)
        self.outputs.add_request(request_id, text, ids)
        self.scheduler.add_request(request)
        return request_id

    def abort_request(self, request_ids) -> None:
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        self.scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)
        for rid in ids:
            self.outputs.drop(rid)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ----- the loop ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        if self.batch_queue is not None:
            landed = self.batch_queue.step()
            if landed is None:
                return []
            sched, runner_out = landed
        else:
            sched = self.scheduler.schedule()
            if sched.is_empty and not sched.finished_req_ids:
                return []
            try:
                runner_out = self.executor.execute_model(sched)
            except Exception as exc:  # the caller finishes exc.failed_ids with an error (docs/server.md)
                culprits = [exc.request_id] if isinstance(exc, RequestFailedError) else []
                # A dead rank, or a multi-rank forward that failed half-way through its collectives,
                # is the engine's end, not one step's; sampling runs after the collectives.
                if not self.healthy or (self.parallel_config.world_size > 1 and not culprits):
                    raise
                raise StepFailedError([r.req_id for r in sched.requests], culprits, exc) from exc
        self.num_steps += 1
        self.tokens_processed_total += sched.total_num_scheduled_tokens
        updates = self.scheduler.update_from_output(sched, runner_out)
        results = []
        stopped = []
        for request, new_ids in updates:
            self.generation_tokens_total += len(new_ids)
            if new_ids and request.num_output_tokens == len(new_ids):
                self.prompt_tokens_total += request.num_prompt_tokens  # counted once, at first token
            out, hit_stop = self.outputs.process(request, new_ids)
            if hit_stop:
                stopped.append(request.request_id)
            results.append(out)
        if stopped:
            self.scheduler.finish_requests(stopped, RequestStatus.FINISHED_STOPPED)
        return results

    def stats(self) -> EngineStats:
        s = self.scheduler.stats()
        return EngineStats(
            num_running=s.num_running,
            num_waiting=s.num_waiting,
            kv_usage=s.kv_usage,
            num_blocks=self.cache_config.num_blocks,
            block_size=self.cache_config.block_size,
            num_preemptions_total=s.num_preemptions_total,
            prefix_cache_queries=s.prefix_cache_queries,
            prefix_cache_hits=s.prefix_cache_hits,
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            tokens_processed_total=self.tokens_processed_total,
            num_steps=self.num_steps,
            **self._moe_stats(),
        )

    def _moe_stats(self) -> dict:
        # Every rank routes (or, under expert parallelism, all-gathers) every token's expert choice.
        moe = getattr(self.runner.model, "moe_stats", None)
        if moe is None:
            return {}
        s = moe()
        return {"moe_expert_tokens": tuple(s["expert_tokens"]), "moe_overflow_total": s["overflow_total"]}
