"""`ModelShape`: the architecture numbers memory and plan math need, and where they come from.

A shape is resolved from (in this order) a named preset of a common open model, a refengine
built-in (`tiny`, `tiny-test`), or a path to a Hugging Face `config.json` (or its directory).
Presets carry the published config.json numbers, so a parameter count computed from them lands
on the published total (Llama-3-8B 8.0B, Llama-3-70B 70.6B, Qwen2-7B 7.6B, Qwen2-72B 72.7B,
Mixtral-8x7B 46.7B); a test checks that.

config.json is read by the engine's own reader (`refengine.model.hf_config`), so a field the file
leaves out gets the same default here as in the engine (transformers' LlamaConfig defaults:
max_position_embeddings 2048, ...). It reads in its shapes-only mode: architectures the engine
cannot run (Qwen-MoE's `num_experts`, a multimodal wrapper's `text_config`) still have shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.naming import config_model_name
from refengine.errors import RefEngineError
from refengine.model.hf_config import DEFAULT_MAX_POSITION_EMBEDDINGS, ModelConfig, parse_model_config, read_config_json


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # per expert for MoE models
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    num_experts: int = 1  # 1 = dense MLP
    experts_per_token: int = 1
    max_position_embeddings: int = DEFAULT_MAX_POSITION_EMBEDDINGS

    def __post_init__(self) -> None:
        for field_name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "num_experts",
            "experts_per_token",
        ):
            if getattr(self, field_name) < 1:
                raise DiagnosisError(f"model {self.name!r}: {field_name} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise DiagnosisError(
                f"model {self.name!r}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.experts_per_token > self.num_experts:
            raise DiagnosisError(f"model {self.name!r}: experts_per_token > num_experts")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    # ---- parameter counts (per layer pieces, so the memory model can split them by TP/PP) ----
    def attention_params(self) -> int:
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        bias = (q_out + 2 * kv_out) if self.qkv_bias else 0
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size + bias

    def mlp_params(self) -> int:
        """All experts' gate/up/down projections plus the router (MoE)."""
        per_expert = 3 * self.hidden_size * self.intermediate_size
        router = self.hidden_size * self.num_experts if self.is_moe else 0
        return self.num_experts * per_expert + router

    def layer_params(self) -> int:
        return self.attention_params() + self.mlp_params() + 2 * self.hidden_size  # two RMSNorms

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def num_parameters(self) -> int:
        return (
            self.embedding_params() + self.num_layers * self.layer_params() + self.hidden_size + self.lm_head_params()
        )

    def active_parameters(self) -> int:
        """Parameters one token touches (MoE: only its top-k experts)."""
        inactive = (self.num_experts - self.experts_per_token) * 3 * self.hidden_size * self.intermediate_size
        return self.num_parameters() - self.num_layers * inactive

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """docs/yardsticks.md: 2 (K and V) x layers x kv_heads x head_dim x bytes — the whole model."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_bytes


# Published config.json numbers (Hugging Face model cards of the base models).
PRESETS: dict[str, ModelShape] = {
    "llama-3-8b": ModelShape(
        "llama-3-8b",
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=8192,
    ),
    "llama-3-70b": ModelShape(
        "llama-3-70b",
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_position_embeddings=8192,
    ),
    "qwen2-7b": ModelShape(
        "qwen2-7b",
        hidden_size=3584,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        qkv_bias=True,
        max_position_embeddings=131072,
    ),
    "qwen2-72b": ModelShape(
        "qwen2-72b",
        hidden_size=8192,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=29568,
        vocab_size=152064,
        qkv_bias=True,
        max_position_embeddings=131072,
    ),
    "mixtral-8x7b": ModelShape(
        "mixtral-8x7b",
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_experts=8,
        experts_per_token=2,
        max_position_embeddings=32768,
    ),
}
# Spellings people type: "Llama-3-70B", "meta-llama/Meta-Llama-3-70B", "llama3-70b", "Qwen/Qwen2-7B".
_ALIASES = {
    "meta-llama-3-8b": "llama-3-8b",
    "llama3-8b": "llama-3-8b",
    "meta-llama-3-70b": "llama-3-70b",
    "llama3-70b": "llama-3-70b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
}


def _normalise(name: str) -> str:
    key = name.strip().lower().rsplit("/", 1)[-1].replace("_", "-")
    for suffix in ("-instruct", "-hf"):
        key = key.removesuffix(suffix)
    return _ALIASES.get(key, key)


def shape_from_model_config(mc: ModelConfig, name: str) -> ModelShape:
    """The shapes of a refengine ModelConfig (dense: num_experts 0 there, 1 here)."""
    moe = mc.num_experts > 1
    return ModelShape(
        name=name,
        hidden_size=mc.hidden_size,
        num_layers=mc.num_hidden_layers,
        num_heads=mc.num_attention_heads,
        num_kv_heads=mc.num_key_value_heads,
        head_dim=mc.head_dim,
        intermediate_size=mc.intermediate_size,
        vocab_size=mc.vocab_size,
        tie_word_embeddings=mc.tie_word_embeddings,
        qkv_bias=mc.attention_bias,
        num_experts=mc.num_experts if moe else 1,
        experts_per_token=(mc.num_experts_per_tok or 1) if moe else 1,
        max_position_embeddings=mc.max_position_embeddings,
    )


def shape_from_hf_config(cfg: dict, name: str = "config.json") -> ModelShape:
    """Shapes from an already-parsed config.json (dense Llama-family or MoE)."""
    try:
        mc = parse_model_config(cfg, supported_only=False)
    except RefEngineError as e:
        raise DiagnosisError(f"{name}: {e}") from None
    return shape_from_model_config(mc, name)


def _refengine_builtin(name: str) -> ModelShape | None:
    from refengine.model.tiny import PRESETS as TINY
    from refengine.model.tiny import model_config_dict

    p = TINY.get(name)
    if p is None:
        return None
    return shape_from_model_config(parse_model_config(model_config_dict(p)), name)


def resolve_model(spec: str) -> ModelShape:
    """A preset name, a refengine built-in, or a path to config.json / a model directory."""
    key = _normalise(spec)
    if key in PRESETS:
        return PRESETS[key]
    builtin = _refengine_builtin(spec)
    if builtin is not None:
        return builtin
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise DiagnosisError(
            f"unknown model {spec!r}: give a preset ({', '.join(PRESETS)}), a refengine model "
            "(tiny, tiny-test) or a path to a Hugging Face config.json"
        )
    try:
        cfg = read_config_json(path)
    except RefEngineError as e:
        raise DiagnosisError(str(e)) from None
    shape = shape_from_hf_config(cfg, name=str(path))  # reads text_config wrappers itself
    return replace(shape, name=config_model_name(cfg, shape.num_parameters()))  # not the folder's name
