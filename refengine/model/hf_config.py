"""`ModelConfig`: the few numbers of a Hugging Face `config.json` the engine needs.

Supported architectures are the Llama family: `LlamaForCausalLM`, `Qwen2ForCausalLM` and
`MistralForCausalLM`. They differ only in details this file flattens into plain fields:

- Qwen2 always has a bias on q/k/v (not on o_proj); Llama has `attention_bias` (q/k/v *and* o);
  Mistral has none.
- `head_dim` may be explicit (Mistral-Nemo: 128 with hidden 5120 / 32 heads); otherwise
  hidden_size // num_attention_heads.
- RoPE parameters come in two spellings: transformers 4.x `rope_theta` + `rope_scaling`, and
  transformers 5.x `rope_parameters` (which holds `rope_theta` and the scaling keys together).
  Both are normalised to `rope_theta` + `rope_scaling` (None for plain RoPE).
- `sliding_window` (Mistral, Qwen2 with use_sliding_window) is ignored: every layer attends to
  the whole context. That matches the model exactly while sequences stay within the window
  (4096 for Mistral-7B-v0.1), which covers the lengths this reference engine runs.
- Missing fields take transformers' LlamaConfig defaults (max_position_embeddings 2048,
  rope_theta 10000, rms_norm_eps 1e-6, num_key_value_heads = num_attention_heads).

`read_config_json` + `parse_model_config(cfg, supported_only=False)` read only the shapes, also of
architectures the engine cannot run, for memory and capacity math (llmdiag's memory model reads
config.json this way, so both agree on every default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from refengine.errors import RefEngineError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "MixtralForCausalLM")
_PLAIN_ROPE_TYPES = ("default", None)
SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
DEFAULT_MAX_POSITION_EMBEDDINGS = 2048  # transformers' LlamaConfig default


@dataclass
class ModelConfig:
    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # None for plain RoPE, else a dict with "rope_type" plus that type's keys (factor, ...).
    rope_scaling: dict | None = None
    tie_word_embeddings: bool = False
    # Bias on q/k/v (Qwen2 always; Llama when attention_bias) and on o_proj (Llama only).
    attention_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    max_position_embeddings: int = DEFAULT_MAX_POSITION_EMBEDDINGS
    bos_token_id: int | None = None
    # All ids that end generation; `eos_token_id` is the primary one (the first).
    eos_token_ids: list[int] = field(default_factory=list)
    # The checkpoint's own dtype ("bfloat16", ...) if config.json says; used by dtype="auto".
    dtype: str | None = None
    # Mixture of experts (Mixtral): experts per layer and experts each token is routed to; 0 = dense.
    # For MoE models `intermediate_size` is one expert's.
    num_experts: int = 0
    num_experts_per_tok: int = 0

    @property
    def eos_token_id(self) -> int | None:
        return self.eos_token_ids[0] if self.eos_token_ids else None

    def num_parameters(self) -> int:
        """Parameter count computed from the shapes (what the loader will allocate)."""
        h, hd = self.hidden_size, self.head_dim
        q_out, kv_out = self.num_attention_heads * hd, self.num_key_value_heads * hd
        attn = h * (q_out + 2 * kv_out) + q_out * h
        if self.attention_bias:
            attn += q_out + 2 * kv_out
        if self.o_proj_bias:
            attn += h
        mlp = 3 * h * self.intermediate_size * max(1, self.num_experts) + h * self.num_experts  # + router
        if self.mlp_bias:
            mlp += 2 * self.intermediate_size + h
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        embed = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.num_hidden_layers * per_layer + h + lm_head

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x bytes (docs/yardsticks.md)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes


def _rope(cfg: dict) -> tuple[float, dict | None]:
    """Normalise both RoPE spellings to (theta, scaling dict or None)."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or {})
    merged = {**params, **scaling}
    theta = float(merged.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    # Old configs spell the type "type"; "su"/"mrope" etc. are not Llama-family types.
    rope_type = merged.pop("rope_type", None) or merged.pop("type", None)
    merged.pop("type", None)
    if rope_type in _PLAIN_ROPE_TYPES:
        return theta, None
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise RefEngineError(
            f"rope scaling type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type in ("llama3", "yarn"):
        # Same default transformers uses when the checkpoint omits it.
        merged.setdefault(
            "original_max_position_embeddings",
            cfg.get(
                "original_max_position_embeddings", cfg.get("max_position_embeddings", DEFAULT_MAX_POSITION_EMBEDDINGS)
            ),
        )
    if rope_type != "yarn" and "factor" not in merged:
        raise RefEngineError(f"rope scaling {rope_type!r} needs a 'factor' in config.json")
    return theta, {"rope_type": rope_type, **merged}


def parse_model_config(cfg: dict, *, supported_only: bool = True) -> ModelConfig:
    """Build a ModelConfig from an already-parsed config.json dict.

    `supported_only=False` reads the shapes of any Llama-like config (memory and capacity math):
    an unknown architecture, activation or RoPE type is not an error, MoE counts are
    read in Mixtral's (`num_local_experts`) or Qwen-MoE's (`num_experts`, `moe_intermediate_size`)
    spelling, and a multimodal wrapper's `text_config` is read as its language model."""
    if not supported_only and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    archs = cfg.get("architectures") or []
    arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if arch is None and supported_only:
        raise RefEngineError(
            f"unsupported architecture {archs or 'None (no architectures in config.json)'}; "
            f"refengine supports {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    arch = arch or (archs[0] if archs else "")
    act = cfg.get("hidden_act", "silu")
    if act != "silu" and supported_only:
        raise RefEngineError(f"hidden_act {act!r} is not supported; the Llama family uses 'silu'")
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        inter = int(cfg["intermediate_size"])
        vocab = int(cfg["vocab_size"])
    except KeyError as e:
        raise RefEngineError(f"config.json lacks required field {e.args[0]!r}") from None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    if heads % kv_heads:
        raise RefEngineError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    theta, scaling = _rope(cfg) if supported_only else _rope_shapes_only(cfg)
    if arch == "Qwen2ForCausalLM":
        qkv_bias, o_bias = True, False
    elif arch == "LlamaForCausalLM":
        qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
    elif arch in SUPPORTED_ARCHITECTURES:
        qkv_bias = o_bias = False
    else:  # another architecture's shapes: Qwen2-derived ones (MoE, VL) keep Qwen2's q/k/v bias
        qkv_bias, o_bias = "Qwen2" in " ".join(archs) or bool(cfg.get("attention_bias", False)), False
    experts, experts_per_tok = _experts(cfg, arch, supported_only)
    if experts and not supported_only and "moe_intermediate_size" in cfg:
        inter = int(cfg["moe_intermediate_size"])  # Qwen-MoE: experts are narrower than the dense size
    eos = cfg.get("eos_token_id")
    eos_ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, list) else [eos])]
    bos = cfg.get("bos_token_id")
    if isinstance(bos, list):
        bos = bos[0] if bos else None
    return ModelConfig(
        architecture=arch,
        model_type=cfg.get("model_type", ""),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=qkv_bias,
        o_proj_bias=o_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)) if arch == "LlamaForCausalLM" else False,
        max_position_embeddings=int(cfg.get("max_position_embeddings", DEFAULT_MAX_POSITION_EMBEDDINGS)),
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=eos_ids,
        dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
        num_experts=experts,
        num_experts_per_tok=experts_per_tok,
    )


def _rope_shapes_only(cfg: dict) -> tuple[float, dict | None]:
    """RoPE for shape-only reading: the engine's normalisation where it applies, else plain theta."""
    try:
        return _rope(cfg)
    except (RefEngineError, TypeError, ValueError):
        return float(cfg.get("rope_theta") or 10000.0), None


def _experts(cfg: dict, arch: str, supported_only: bool) -> tuple[int, int]:
    """(experts per layer, experts per token); (0, 0) for a dense model."""
    if supported_only:
        if arch != "MixtralForCausalLM":
            return 0, 0
        return int(cfg.get("num_local_experts", 0) or 0), int(cfg.get("num_experts_per_tok", 0) or 0)
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    if experts <= 1:
        return 0, 0
    return experts, int(cfg.get("num_experts_per_tok") or 1)


def read_config_json(path: str | Path) -> dict:
    """The parsed JSON object of a config.json file, or of `<path>/config.json` for a directory."""
    path = Path(path)
    cfg_file = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RefEngineError(f"{cfg_file} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise RefEngineError(f"{cfg_file} must hold a JSON object")
    return cfg


def load_model_config(path: str | Path) -> ModelConfig:
    """Read `<path>/config.json` into a ModelConfig, with errors that say what is wrong."""
    path = Path(path)
    if not path.is_dir():
        raise RefEngineError(f"model directory {str(path)!r} does not exist")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise RefEngineError(f"{str(path)!r} has no config.json; point the model at a Hugging Face model directory")
    return parse_model_config(read_config_json(cfg_file))
