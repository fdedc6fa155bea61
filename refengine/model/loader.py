"""Load a Hugging Face safetensors checkpoint into `LlamaForCausalLM`.

The model is built directly on the target device in the target dtype with uninitialised
parameters (no random init to throw away), then every checkpoint tensor is read from a memory-
mapped safetensors file, one at a time, and handed to its parameter's `weight_loader`, which
narrows it to this rank's shard and copies (casting) into place. Peak extra memory is one tensor.

Name mapping: q_proj/k_proj/v_proj and gate_proj/up_proj go to shards of the fused qkv_proj and
gate_up_proj (the model's `stacked_params_mapping`). Skipped: rotary `inv_freq` buffers some old
checkpoints carry, and `lm_head.weight` when embeddings are tied (the head shares the embedding).
Every parameter (and every shard of a fused one) must be filled, or loading fails naming them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from refengine.errors import RefEngineError
from refengine.model.hf_config import ModelConfig
from refengine.model.layers.linear import LinearBase, LinearMethod
from refengine.model.layers.weight_utils import WEIGHT_LOADER, copy_weight
from refengine.model.llama import LlamaForCausalLM

logger = logging.getLogger(__name__)

_SKIP_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def safetensors_files(model_dir: Path) -> list[Path]:
    """The checkpoint's safetensors files: the sharded index if present, else model.safetensors / *.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise RefEngineError(f"{index} is not a valid safetensors index ({e})") from None
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise RefEngineError(
                f"{index.name} lists shard(s) that are missing from {model_dir}: {', '.join(missing[:5])}"
            )
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    files = sorted(model_dir.glob("*.safetensors"))
    if files:
        return files
    has_bin = any(model_dir.glob("*.bin")) or any(model_dir.glob("*.pt"))
    raise RefEngineError(
        f"no *.safetensors weights in {model_dir}"
        + (" (found .bin/.pt files)" if has_bin else "")
        + "; refengine loads safetensors only, .bin checkpoints are not supported. Convert once with "
        "transformers: AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)"
    )


def iter_checkpoint(files: list[Path], keep=None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) one at a time from memory-mapped safetensors files; `keep(name)` False
    skips a tensor without reading it (a pipeline stage skips the other stages' layers)."""
    for path in files:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                if keep is None or keep(name):
                    yield name, f.get_tensor(name)


def _default_weight_loader(param: torch.nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
    copy_weight(param.data, loaded_weight)


def _expected(params: dict, mapping) -> set[tuple[str, object]]:
    """Every (parameter, shard) the checkpoint must fill: one per shard of a fused parameter
    (qkv_proj: q, k, v), one (name, None) for the others."""
    fused_shards: dict[str, list] = {}
    for fused, _, shard in mapping:
        fused_shards.setdefault(fused, []).append(shard)
    expected: set[tuple[str, object]] = set()  # (parameter name, shard id or None)
    for pname in params:
        fused = next((f for f in fused_shards if f".{f}." in pname), None)
        expected |= {(pname, s) for s in fused_shards[fused]} if fused else {(pname, None)}
    return expected


def _destination(model: LlamaForCausalLM, name: str, mapping) -> tuple[str, str, object] | None:
    """(checkpoint name as this model reads it, parameter name, shard) for one checkpoint tensor,
    or None for a tensor this model does not load (buffers, a tied lm_head, another stage's)."""
    if name.endswith(_SKIP_SUFFIXES):
        return None
    if name == "lm_head.weight" and model.config.tie_word_embeddings:
        return None
    remap = getattr(model, "remap_weight_name", None)
    if remap is not None:  # pipeline stages skip other stages' tensors
        name = remap(name)
        if name is None:
            return None
    for fused, ckpt, shard_id in mapping:
        if f".{ckpt}." in name:
            return name, name.replace(f".{ckpt}.", f".{fused}."), shard_id
    return name, name, None


def _check_complete(expected: set, loaded: set, unexpected: list[str], mapping) -> None:
    missing = expected - loaded
    if missing:
        names = sorted(_checkpoint_name(p, s, mapping) for p, s in missing)
        raise RefEngineError(
            f"checkpoint is missing {len(names)} weight(s), e.g. {', '.join(names[:5])}; "
            "is it a complete Llama/Qwen2/Mistral checkpoint matching config.json?"
        )
    if unexpected:
        logger.warning(
            "ignored %d checkpoint tensor(s) the model has no parameter for, e.g. %s",
            len(unexpected),
            ", ".join(unexpected[:5]),
        )


def load_weights(model: LlamaForCausalLM, weights) -> None:
    """Feed (checkpoint name, tensor) pairs through the parameters' weight loaders; check completeness."""
    params = dict(model.named_parameters())  # tied lm_head.weight is deduplicated away
    mapping = model.stacked_params_mapping
    expected = _expected(params, mapping)
    loaded, unexpected = set(), []
    for ckpt_name, tensor in weights:
        dest = _destination(model, ckpt_name, mapping)
        if dest is None:
            continue
        name, pname, shard = dest
        param = params.get(pname)
        if param is None:
            unexpected.append(name)
            continue
        loader = getattr(param, WEIGHT_LOADER, _default_weight_loader)
        loader(param, tensor, shard)
        loaded.add((pname, shard))
    _check_complete(expected, loaded, unexpected, mapping)
    for module in model.modules():
        if isinstance(module, LinearBase):
            module.linear_method.process_weights_after_loading(module)


def _checkpoint_name(pname: str, shard, mapping) -> str:
    for fused, ckpt, shard_id in mapping:
        if shard is not None and shard == shard_id and f".{fused}." in pname:
            return pname.replace(f".{fused}.", f".{ckpt}.")
    return pname


def model_class(model_config: ModelConfig):
    """The module class for the checkpoint's architecture (the Llama family, or Mixtral's MoE)."""
    if model_config.architecture == "MixtralForCausalLM":
        from refengine.model.mixtral import MixtralForCausalLM

        return MixtralForCausalLM
    return LlamaForCausalLM


def load_model(
    model_dir: str | Path,
    model_config: ModelConfig,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    linear_method: LinearMethod | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    quantization=None,
    **parallel,
) -> LlamaForCausalLM:
    """Build the model on `device` in `dtype` and fill it from the directory's safetensors.

    `parallel` (stage=PipelineStage, and for MoE models moe=MoEParallel) is passed to the model."""
    model_dir = Path(model_dir)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    files = safetensors_files(model_dir)
    with _default_dtype(dtype), torch.device(device):
        model = model_class(model_config)(
            model_config, linear_method=linear_method, tp_rank=tp_rank, tp_size=tp_size, **parallel
        )
        if quantization is not None:  # refengine.quant.QuantConfig: per-layer FP8 methods, before loading
            quantization.prepare_model(model)
    remap = getattr(model, "remap_weight_name", None)
    load_weights(model, iter_checkpoint(files, None if remap is None else (lambda n: remap(n) is not None)))
    return model.eval()
