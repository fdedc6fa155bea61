"""Runs one scheduled step: flat varlen inputs → forward → logits of finishing rows → tokens.

It owns the model, the KV cache tensors and the sampler; it keeps no per-request state besides
sampler generators, so a `SchedulerOutput` is all it needs (and all another rank needs: under
tensor parallelism every rank runs this same step, and only the one with `samples` samples;
the pipeline-parallel stage runner is refengine/distributed/pipeline_runner.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from refengine.attention.metadata import AttentionMetadata, build_attention_metadata
from refengine.core.outputs import ModelRunnerOutput, SchedulerOutput
from refengine.runner.sampler import Sampler, SamplingRow


class CausalLM(Protocol):
    """What the runner needs of a model (refengine/model's LlamaForCausalLM and MixtralForCausalLM):
    a forward over a flat varlen batch, and the logits of chosen rows. The runner never imports the
    model's classes; the engine hands it one."""

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate: Any = None,
    ) -> Any: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


@dataclass
class StepTimings:
    """Seconds spent in each phase of the last step (the bench reads these)."""

    prepare_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        kv_caches: list[torch.Tensor],
        block_size: int,
        device: torch.device,
        seed: int,
        samples: bool = True,
    ):
        self.model = model
        self.samples = samples  # False on TP ranks other than the sampler: they compute logits, return none
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.device = device
        self.sampler = Sampler(seed, device)
        self.last_timings = StepTimings()

    def _prepare(self, sched: SchedulerOutput):
        token_ids: list[int] = []
        positions: list[int] = []
        seqs = []
        sample_index: list[int] = []
        rows: list[SamplingRow] = []
        for req in sched.requests:
            token_ids.extend(req.token_ids)
            positions.extend(range(req.start_pos, req.end_pos))
            seqs.append((req.start_pos, req.num_tokens, req.block_ids))
            if req.sample:
                sample_index.append(len(token_ids) - 1)
                rows.append(SamplingRow(req.req_id, req.sampling_params, req.num_output_tokens, req.eos_token_id))
        input_ids = torch.tensor(token_ids, dtype=torch.long, device=self.device)
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        meta = build_attention_metadata(seqs, self.block_size, self.device)
        idx = torch.tensor(sample_index, dtype=torch.long, device=self.device)
        return input_ids, pos, meta, idx, rows

    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.sampler.forget(sched.finished_req_ids)
        if sched.is_empty:
            return ModelRunnerOutput()
        t0 = time.perf_counter()
        input_ids, positions, meta, sample_index, rows = self._prepare(sched)
        t1 = time.perf_counter()
        hidden = self.model(input_ids, positions, self.kv_caches, meta)
        out = ModelRunnerOutput()
        if rows:
            logits = self.model.compute_logits(hidden[sample_index])  # a TP all-gather: every rank calls it
            t2 = time.perf_counter()
            if self.samples:
                tokens = self.sampler(logits, rows)
                out.sampled_token_ids = {row.req_id: tok for row, tok in zip(rows, tokens)}
        else:
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        self.last_timings = StepTimings(prepare_s=t1 - t0, forward_s=t2 - t1, sample_s=t3 - t2)
        return out
