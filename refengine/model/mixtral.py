"""Mixtral (MixtralForCausalLM): the Llama decoder with its MLP replaced by a mixture of experts.

Attention, norms, RoPE, embeddings, the LM head, pipeline stages and tensor parallelism are
llama.py's; only the block's feed-forward differs (layers/moe.py). Checkpoint names follow
Hugging Face's: `block_sparse_moe.gate` (the router) and `block_sparse_moe.experts.<e>.w1/w3/w2`
(gate, up, down), which the loader's stacked mapping sends to the fused per-layer expert tensors.
"""

from __future__ import annotations

import functools

import torch

from refengine.model.hf_config import ModelConfig
from refengine.model.layers.linear import LinearMethod
from refengine.model.layers.moe import MoE, MoEParallel
from refengine.model.layers.norm import RMSNorm
from refengine.model.layers.rotary import RotaryEmbedding
from refengine.model.llama import LlamaAttention, LlamaForCausalLM, PreNormDecoderLayer
from refengine.parallel.layout import PipelineStage


class MixtralDecoderLayer(PreNormDecoderLayer):
    def __init__(
        self,
        cfg: ModelConfig,
        rotary_emb: RotaryEmbedding,
        tp: dict,
        linear_method: LinearMethod | None,
        moe: MoEParallel | None = None,
    ):
        super().__init__()
        self.self_attn = LlamaAttention(cfg, rotary_emb, tp, linear_method)
        self.block_sparse_moe = MoE(
            cfg.hidden_size, cfg.intermediate_size, cfg.num_experts, cfg.num_experts_per_tok, parallel=moe, **tp
        )
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.block_sparse_moe(hidden)


class MixtralForCausalLM(LlamaForCausalLM):
    def __init__(
        self,
        config: ModelConfig,
        linear_method: LinearMethod | None = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        stage: PipelineStage | None = None,
        moe: MoEParallel | None = None,
    ):
        super().__init__(
            config, linear_method, tp_rank, tp_size, stage, make_layer=functools.partial(MixtralDecoderLayer, moe=moe)
        )
        # checkpoint fragment -> fused parameter fragment, shard (expert, 0 gate | 1 up | 2 down)
        self.stacked_params_mapping = list(LlamaForCausalLM.stacked_params_mapping) + [
            (f"experts.{name}", f"experts.{e}.{w}", (e, shard))
            for e in range(config.num_experts)
            for name, w, shard in (("w13", "w1", 0), ("w13", "w3", 1), ("w2", "w2", 2))
        ]

    def moe_layers(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]

    def moe_stats(self) -> dict:
        """Assignments routed to each expert (summed over this stage's layers) and capacity overflow."""
        layers = self.moe_layers()
        tokens = torch.stack([m.expert_tokens for m in layers]).sum(0) if layers else torch.zeros(0)
        return {"expert_tokens": tokens.tolist(), "overflow_total": sum(m.overflow for m in layers)}
