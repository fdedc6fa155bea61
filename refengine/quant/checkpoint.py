"""Reading an FP8 checkpoint's `quantization_config` (config.json): which layout, which layers.

Two layouts are common on the Hugging Face hub:

- compressed-tensors (llm-compressor, "FP8-Dynamic" models): `weight` float8_e4m3fn plus
  `weight_scale`, per-tensor (one value) or per-channel ([out, 1]); maybe an `input_scale` for
  static activation quantization, which is ignored here (activations use dynamic per-token
  scales). `quantization_config = {"quant_method": "compressed-tensors", "config_groups":
  {"group_0": {"weights": {"type": "float", "num_bits": 8, "strategy": "channel"}, ...}},
  "ignore": ["lm_head", "re:.*mlp.gate$"]}`.
- fine-grained FP8 (DeepSeek-V3, Qwen3-FP8, transformers' FineGrainedFP8Config): `weight`
  float8_e4m3fn plus `weight_scale_inv` of [ceil(out/128), ceil(in/128)], *multiplied* in.
  `quantization_config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
  "weight_block_size": [128, 128], "modules_to_not_convert": [...]}`. Without
  `weight_block_size` (vLLM's own FP8 export) the scale is per-tensor `weight_scale`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from refengine.errors import RefEngineError
from refengine.model.hf_config import read_config_json
from refengine.quant.policy import matches, parse_skip


@dataclass
class CheckpointFp8Format:
    source: str  # "compressed-tensors" or "fp8"
    scale_name: str  # checkpoint tensor name suffix: weight_scale or weight_scale_inv
    kind: str  # tensor | channel | block
    block: int = 128
    ignore: list[str] = field(default_factory=list)  # layers left unquantized in the checkpoint

    def is_quantized(self, module_name: str) -> bool:
        """Was this layer stored in FP8? (Not when the checkpoint's ignore list names it.)"""
        for pat in self.ignore:
            if pat.startswith("re:"):
                # Regexes are written against unfused HF names; try the fused name's parts too.
                rx = re.compile(pat[3:])
                candidates = [
                    module_name,
                    *(module_name.replace(f, u) for u, f in (("q_proj", "qkv_proj"), ("gate_proj", "gate_up_proj"))),
                ]
                if any(rx.search(c) or rx.fullmatch(c) for c in candidates):
                    return False
            elif any(matches(module_name, p) for p in parse_skip(pat)):
                return False
        return True


def _compressed_tensors(q: dict) -> CheckpointFp8Format:
    groups = q.get("config_groups") or {}
    if not groups:
        raise RefEngineError("compressed-tensors quantization_config has no config_groups")
    weights = next(iter(groups.values())).get("weights") or {}
    if weights.get("type") != "float" or int(weights.get("num_bits", 0)) != 8:
        raise RefEngineError(
            f"compressed-tensors scheme {weights} is not FP8 (type float, 8 bits); only FP8 checkpoints are supported"
        )
    strategy = weights.get("strategy", "tensor")
    if strategy == "block":
        block = weights.get("block_structure") or [128, 128]
        if block[0] != block[1]:
            raise RefEngineError(f"block_structure {block} is not square; only square blocks are supported")
        return CheckpointFp8Format(
            "compressed-tensors", "weight_scale", "block", int(block[0]), list(q.get("ignore") or [])
        )
    if strategy not in ("tensor", "channel"):
        raise RefEngineError(
            f"compressed-tensors weight strategy {strategy!r} is not supported (tensor, channel or block)"
        )
    return CheckpointFp8Format("compressed-tensors", "weight_scale", strategy, ignore=list(q.get("ignore") or []))


def _fine_grained(q: dict) -> CheckpointFp8Format:
    fmt = q.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise RefEngineError(f"FP8 format {fmt!r} is not supported; only e4m3 (float8_e4m3fn)")
    ignore = list(q.get("modules_to_not_convert") or q.get("ignored_layers") or [])
    block = q.get("weight_block_size")
    if block:
        if block[0] != block[1]:
            raise RefEngineError(f"weight_block_size {block} is not square; only square blocks are supported")
        return CheckpointFp8Format("fp8", "weight_scale_inv", "block", int(block[0]), ignore)
    return CheckpointFp8Format("fp8", "weight_scale", "tensor", ignore=ignore)


def read_checkpoint_format(model_dir: str | Path) -> CheckpointFp8Format | None:
    """The FP8 layout config.json declares, or None for an unquantized checkpoint."""
    try:
        cfg = read_config_json(Path(model_dir) / "config.json")
    except (OSError, RefEngineError):
        return None  # load_model_config reports a missing or broken config.json with a better message
    q = cfg.get("quantization_config")
    if not q:
        return None
    method = q.get("quant_method")
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "fp8":
        return _fine_grained(q)
    raise RefEngineError(
        f"checkpoint quantization {method!r} is not supported; refengine loads unquantized "
        "checkpoints and FP8 ones (compressed-tensors or fine-grained fp8)"
    )
