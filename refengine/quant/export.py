"""Write an FP8 copy of an unquantized checkpoint in either Hugging Face layout.

Used by the tests (the loader must read what real FP8 checkpoints look like) and handy for trying
FP8 loading without downloading one:

    python -m refengine.quant.export tiny-test /tmp/tiny-fp8 --layout fine-grained --block 16

Layouts: `compressed-tensors` (`weight_scale`, strategy tensor or channel) and `fine-grained`
(`weight_scale_inv`, square blocks). Linear weights of the decoder layers are quantized;
embeddings, lm_head and norms are copied, and the ignore list says so, as real exports do.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from refengine.model.hf_config import read_config_json
from refengine.model.loader import iter_checkpoint, safetensors_files
from refengine.model.tiny import resolve_model
from refengine.numerics.fp8 import quantize_blocks, quantize_per_channel, quantize_per_tensor

LINEAR_SUFFIXES = (
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "o_proj.weight",
    "gate_proj.weight",
    "up_proj.weight",
    "down_proj.weight",
)


def _quantization_config(layout: str, strategy: str, block: int) -> dict:
    if layout == "compressed-tensors":
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy, "dynamic": False}
        return {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": weights,
                    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
                }
            },
            "ignore": ["lm_head"],
        }
    return {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [block, block],
        "modules_to_not_convert": ["lm_head"],
    }


def export_fp8(
    src: str | Path,
    dst: str | Path,
    layout: str = "compressed-tensors",
    strategy: str = "channel",
    block: int = 128,
    skip: tuple[str, ...] = (),
) -> Path:
    """Quantize `src`'s decoder linears into a new model directory `dst`; returns it.

    `skip`: checkpoint-name fragments left unquantized (and listed in the ignore list)."""
    src, dst = resolve_model(str(src)), Path(dst)
    if layout not in ("compressed-tensors", "fine-grained"):
        raise ValueError(f"layout must be compressed-tensors or fine-grained, got {layout!r}")
    dst.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for name, w in iter_checkpoint(safetensors_files(src)):
        if not name.endswith(LINEAR_SUFFIXES) or any(s in name for s in skip):
            tensors[name] = w.contiguous()
            continue
        base = name[: -len("weight")]
        if layout == "fine-grained":
            w8, scale = quantize_blocks(w, block)
            tensors[base + "weight_scale_inv"] = scale
        else:
            w8, scale = quantize_per_tensor(w) if strategy == "tensor" else quantize_per_channel(w)
            tensors[base + "weight_scale"] = scale
        tensors[base + "weight"] = w8
    save_file(tensors, str(dst / "model.safetensors"))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)
    cfg = read_config_json(src)
    q = _quantization_config(layout, strategy, block)
    ignore_key = "ignore" if layout == "compressed-tensors" else "modules_to_not_convert"
    q[ignore_key] = [*q[ignore_key], *skip]
    cfg["quantization_config"] = q
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def main() -> None:
    p = argparse.ArgumentParser(description="Write an FP8 copy of a checkpoint (compressed-tensors or fine-grained).")
    p.add_argument("src", help="Model directory or built-in preset.")
    p.add_argument("dst", help="Output directory.")
    p.add_argument("--layout", default="compressed-tensors", choices=["compressed-tensors", "fine-grained"])
    p.add_argument("--strategy", default="channel", choices=["tensor", "channel"], help="compressed-tensors scales.")
    p.add_argument("--block", type=int, default=128, help="fine-grained block edge.")
    a = p.parse_args()
    print(export_fp8(a.src, a.dst, a.layout, a.strategy, a.block))


if __name__ == "__main__":
    main()
