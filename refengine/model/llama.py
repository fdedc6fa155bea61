"""The Llama family (Llama, Qwen2, Mistral) as one module: GQA, RoPE with scaling, RMSNorm, SwiGLU.

The differences between the three are config fields (see hf_config.py): Qwen2's q/k/v bias,
Llama's optional attention/MLP bias, explicit head_dim, tied embeddings. Parameter names match
Hugging Face's, except that q/k/v and gate/up are fused; `stacked_params_mapping` tells the
loader which checkpoint tensor fills which shard of which fused parameter (as vLLM does).

The forward works on a flat token axis (all sequences' new tokens concatenated, see
layers/attention.py) with explicit positions, so one call serves any mix of prefills, prefill
chunks and decodes.

Pipeline parallelism: a PP stage owns layers [start_layer, end_layer) of `model.layers` (the
others are weightless `MissingLayer`s, so no rank holds the whole model); a stage after the first
takes (hidden, residual) from the previous stage instead of embedding, a stage before the last
returns them, and only the last applies the final norm and owns the LM head. `kv_caches` holds
this stage's layers only, hence `i - start_layer`. `remap_weight_name` tells the loader which
checkpoint tensors this stage skips.
"""

from __future__ import annotations

import torch
from torch import nn

from refengine.attention.metadata import AttentionMetadata
from refengine.model.hf_config import ModelConfig
from refengine.model.layers.activation import SiluAndMul
from refengine.model.layers.attention import Attention
from refengine.model.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from refengine.model.layers.linear import LinearMethod, MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from refengine.model.layers.norm import RMSNorm
from refengine.model.layers.rotary import RotaryEmbedding
from refengine.parallel.layout import PipelineStage


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary_emb: RotaryEmbedding, tp: dict, linear_method: LinearMethod | None):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(
            cfg.hidden_size,
            cfg.head_dim,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            bias=cfg.attention_bias,
            linear_method=linear_method,
            **tp,
        )
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size = self.num_heads * cfg.head_dim
        self.kv_size = self.num_kv_heads * cfg.head_dim
        self.o_proj = RowParallelLinear(
            cfg.num_attention_heads * cfg.head_dim,
            cfg.hidden_size,
            bias=cfg.o_proj_bias,
            linear_method=linear_method,
            **tp,
        )
        self.rotary_emb = rotary_emb  # one cos/sin table shared by all layers
        self.attn = Attention(self.num_heads, cfg.head_dim, cfg.head_dim**-0.5, self.num_kv_heads)

    def forward(self, positions, hidden, kv_cache, meta):
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v, kv_cache, meta))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: dict, linear_method: LinearMethod | None):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            cfg.hidden_size, [cfg.intermediate_size] * 2, bias=cfg.mlp_bias, linear_method=linear_method, **tp
        )
        self.act_fn = SiluAndMul()
        self.down_proj = RowParallelLinear(
            cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias, linear_method=linear_method, **tp
        )

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class PreNormDecoderLayer(nn.Module):
    """Attention then a feed-forward, each behind an RMSNorm with the residual add fused into the
    next norm. Subclasses build `self_attn`, the two norms and their feed-forward (`feed_forward`)."""

    # Built by each subclass's __init__; declared for the type checker.
    self_attn: nn.Module
    input_layernorm: RMSNorm
    post_attention_layernorm: RMSNorm

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, positions, hidden, residual, kv_cache, meta):
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, kv_cache, meta)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.feed_forward(hidden), residual


class LlamaDecoderLayer(PreNormDecoderLayer):
    def __init__(self, cfg: ModelConfig, rotary_emb: RotaryEmbedding, tp: dict, linear_method: LinearMethod | None):
        super().__init__()
        self.self_attn = LlamaAttention(cfg, rotary_emb, tp, linear_method)
        self.mlp = LlamaMLP(cfg, tp, linear_method)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.mlp(hidden)


class MissingLayer(nn.Module):
    """Placeholder for a layer another pipeline stage owns: no weights, never called."""


class LlamaModel(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        tp: dict,
        linear_method: LinearMethod | None,
        stage: PipelineStage | None = None,
        make_layer=LlamaDecoderLayer,
    ):
        super().__init__()
        self.stage = stage = stage or PipelineStage.whole(cfg.num_hidden_layers)
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, **tp) if stage.is_first else None
        rope = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        self.start_layer, self.end_layer = stage.start_layer, stage.end_layer
        self.layers = nn.ModuleList(
            make_layer(cfg, rope, tp, linear_method) if self.start_layer <= i < self.end_layer else MissingLayer()
            for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if stage.is_last else None

    def forward(self, input_ids, positions, kv_caches, meta, intermediate=None):
        if self.stage.is_first:
            assert self.embed_tokens is not None, "the first stage has the embedding"
            hidden, residual = self.embed_tokens(input_ids), None
        else:
            hidden, residual = intermediate  # from the previous stage
        for i in range(self.start_layer, self.end_layer):
            hidden, residual = self.layers[i](positions, hidden, residual, kv_caches[i - self.start_layer], meta)
        if not self.stage.is_last:
            return hidden, residual
        assert self.norm is not None, "the last stage has the final norm"
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    # checkpoint name fragment -> (fused parameter fragment, shard id)
    stacked_params_mapping = [
        ("qkv_proj", "q_proj", "q"),
        ("qkv_proj", "k_proj", "k"),
        ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", 0),
        ("gate_up_proj", "up_proj", 1),
    ]

    def __init__(
        self,
        config: ModelConfig,
        linear_method: LinearMethod | None = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        stage: PipelineStage | None = None,
        make_layer=LlamaDecoderLayer,
    ):
        super().__init__()
        self.config = config
        tp = {"tp_rank": tp_rank, "tp_size": tp_size}
        self.model = LlamaModel(config, tp, linear_method, stage, make_layer)
        self.stage = self.model.stage
        self.lm_head = (
            ParallelLMHead(config.vocab_size, config.hidden_size, tp_rank=tp_rank, tp_size=tp_size)
            if self.stage.is_last
            else None
        )
        if config.tie_word_embeddings and self.stage.is_first and self.stage.is_last:
            assert self.lm_head is not None and self.model.embed_tokens is not None  # one stage has both
            self.lm_head.tie_to(self.model.embed_tokens)

    def remap_weight_name(self, name: str) -> str | None:
        """The parameter a checkpoint tensor fills on this pipeline stage, or None to skip it."""
        stage = self.stage
        if name.startswith("model.layers."):
            return name if stage.start_layer <= int(name.split(".")[2]) < stage.end_layer else None
        if name == "model.embed_tokens.weight" and not stage.is_first:
            # A tied last stage has no embedding: its LM head loads the same tensor.
            return "lm_head.weight" if stage.is_last and self.config.tie_word_embeddings else None
        if name.startswith(("model.norm.", "lm_head.")) and not stage.is_last:
            return None
        return name

    # no_grad rather than inference_mode: callers (sampler, tests) may edit the outputs in place,
    # which inference tensors forbid outside inference mode. The runner may add inference_mode.
    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate=None,
    ):
        """input_ids, positions: [T] long (flat varlen order) -> final-normed hidden states [T, hidden]
        (on a stage before the last: the (hidden, residual) pair for the next stage)."""
        return self.model(input_ids, positions, kv_caches, attn_metadata, intermediate)

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] (usually each sequence's last token) -> float32 logits [N, vocab]."""
        assert self.lm_head is not None, "only the last pipeline stage computes logits"
        return self.lm_head(hidden).float()
