"""The FP8 `LinearMethod`s: online quantization, and loading a checkpoint that is already FP8.

Both end with the same layer state, which `fp8_matmul.fp8_linear` computes with:
`layer.weight` (float8_e4m3fn, [out, in]) and `layer.weight_scale` (float32; [1], [out, 1] or
[ceil(out/128), ceil(in/128)]).

The methods are installed per layer after the model is built (see quant/config.py), so a layer
is created with plain full-precision parameters first:
- online: those parameters are loaded from the checkpoint as usual and quantized in
  `process_weights_after_loading` (one layer at a time, so the extra memory is one weight);
- checkpoint: `create_weights` replaces them with FP8 + scale parameters whose loaders place
  each checkpoint shard (q/k/v, gate/up) at the right rows, block rows or per-tensor fill.
"""

from __future__ import annotations

import torch
from torch import nn

from refengine.errors import RefEngineError
from refengine.model.layers.linear import LinearMethod, RowParallelLinear, UnquantizedLinearMethod
from refengine.model.layers.weight_utils import attach_weight_loader
from refengine.numerics.fp8 import BLOCK, FP8_DTYPE, dequantize, quantize
from refengine.quant.fp8_matmul import fp8_linear


def _set_param(layer: nn.Module, name: str, value: torch.Tensor) -> nn.Parameter:
    if hasattr(layer, name):
        delattr(layer, name)  # free the old tensor before the new one is kept
    p = nn.Parameter(value, requires_grad=False)
    layer.register_parameter(name, p)
    return p


class Fp8LinearMethod(LinearMethod):
    """Shared forward. `cache_dequantized`: keep the dequantized weight (CPU: see fp8_matmul.py)."""

    def __init__(self, cache_dequantized: bool = False, use_w8a8: bool = False):
        self.cache_dequantized = cache_dequantized
        self.use_w8a8 = use_w8a8

    block = BLOCK  # edge of block scales (a checkpoint may bring another)

    def _configure(self, layer: nn.Module) -> None:
        # Plain attributes of the layer: torch annotates Module.__setattr__'s value as Tensor | Module,
        # narrower than what it takes (any object), hence the ignores.
        layer.fp8_block = self.block  # type: ignore[assignment]
        layer.fp8_cache_dequantized = self.cache_dequantized  # type: ignore[assignment]
        layer.fp8_use_w8a8 = self.use_w8a8  # type: ignore[assignment]
        layer.fp8_dequant_cache = None  # type: ignore[assignment]

    def apply(self, layer, x, bias=None):
        return fp8_linear(layer, x, bias)


class Fp8OnlineLinearMethod(Fp8LinearMethod):
    """Quantize the loaded full-precision weight to E4M3 with per-channel or block scales."""

    def __init__(self, scale_kind: str = "channel", **kw):
        super().__init__(**kw)
        self.scale_kind = scale_kind

    def process_weights_after_loading(self, layer):
        w8, scale = quantize(layer.weight.data, self.scale_kind)
        _set_param(layer, "weight", w8)
        _set_param(layer, "weight_scale", scale)
        self._configure(layer)


def _shard_rows(layer, shard_id) -> tuple[int, int]:
    """(first row, rows) this rank's part of a checkpoint shard occupies in the fused weight."""
    if isinstance(layer, RowParallelLinear) or not hasattr(layer, "output_partition_sizes"):
        return 0, layer.weight.shape[0]
    sizes = layer.output_partition_sizes()
    if shard_id is None:
        return 0, sum(sizes)
    index = {"q": 0, "k": 1, "v": 2}.get(shard_id, shard_id)
    return sum(sizes[:index]), sizes[index]


def _rank_chunk(layer, shard_id) -> int:
    """Which chunk of the full checkpoint tensor this rank takes (QKV replicates KV heads)."""
    if shard_id in ("k", "v"):
        return layer.tp_rank // getattr(layer, "num_kv_head_replicas", 1)
    return layer.tp_rank


class Fp8CheckpointLinearMethod(Fp8LinearMethod):
    """Parameters for a checkpoint already in FP8: compressed-tensors `weight_scale` (per-tensor
    or per-channel) or fine-grained `weight_scale_inv` (128x128 blocks).

    Per-tensor scales are expanded to per-channel rows at load time: a fused qkv_proj has three
    different per-tensor scales (q, k, v), and rows hold all three exactly. `upcast=True`
    (the policy skips this layer) dequantizes after loading and runs it in the compute dtype."""

    def __init__(
        self,
        scale_name: str,
        kind: str,
        block: int = BLOCK,
        upcast: bool = False,
        compute_dtype: torch.dtype = torch.float32,
        **kw,
    ):
        super().__init__(**kw)
        self.scale_name, self.kind, self.block = scale_name, kind, block
        self.upcast, self.compute_dtype = upcast, compute_dtype

    def create_weights(
        self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size, params_dtype
    ):
        out, inp = sum(output_partition_sizes), input_size_per_partition
        device = layer.weight.device if hasattr(layer, "weight") else None
        w = _set_param(layer, "weight", torch.empty(out, inp, dtype=FP8_DTYPE, device=device))
        attach_weight_loader(w, layer.weight_loader)
        if self.kind == "block":
            shape = (-(-out // self.block), -(-inp // self.block))
            loader = self._load_block_scale
        else:
            shape, loader = (out, 1), self._load_channel_scale
        s = _set_param(layer, self.scale_name, torch.ones(shape, dtype=torch.float32, device=device))
        attach_weight_loader(s, lambda param, loaded, shard_id=None: loader(layer, param, loaded, shard_id))

    def install(self, layer) -> None:
        """Swap a built layer's full-precision weight for FP8 + scale parameters."""
        out, inp = layer.weight.shape
        sizes = layer.output_partition_sizes() if hasattr(layer, "output_partition_sizes") else [out]
        self.create_weights(layer, inp, sizes, layer.input_size, layer.output_size, layer.params_dtype)

    @staticmethod
    def _load_channel_scale(layer, param, loaded, shard_id):
        loaded = loaded.float()
        if loaded.numel() == 1:  # per-tensor: fill this shard's rows
            first, rows = _shard_rows(layer, shard_id)
            param.data[first : first + rows] = loaded.reshape(())
        elif isinstance(layer, RowParallelLinear):  # output dim not split: every rank has all rows
            param.data.copy_(loaded.reshape(param.shape))
        else:
            layer.weight_loader(param, loaded.reshape(-1, 1), shard_id)

    def _load_block_scale(self, layer, param, loaded, shard_id):
        b = self.block
        loaded = loaded.float()
        if isinstance(layer, RowParallelLinear):
            cols = param.shape[1]
            if layer.tp_size > 1 and (layer.weight.shape[1] % b):
                raise RefEngineError(
                    f"block-FP8 row-parallel layer: input shard {layer.weight.shape[1]} is not a multiple of {b}"
                )
            param.data.copy_(loaded.narrow(1, layer.tp_rank * cols, cols))
            return
        first, rows = _shard_rows(layer, shard_id)
        fused = shard_id is not None
        if (fused or layer.tp_size > 1) and (first % b or rows % b):
            raise RefEngineError(
                f"block-FP8 checkpoint: a shard of {rows} rows at row {first} does not fall on "
                f"{b}-row block boundaries, so its scales cannot be placed"
            )
        nb = -(-rows // b)
        src = loaded.narrow(0, _rank_chunk(layer, shard_id) * nb, nb)
        param.data.narrow(0, first // b, nb).copy_(src)

    def process_weights_after_loading(self, layer):
        scale = getattr(layer, self.scale_name)
        if self.scale_name != "weight_scale":
            delattr(layer, self.scale_name)
            _set_param(layer, "weight_scale", scale.data)
        if self.upcast:
            w = dequantize(layer.weight.data, layer.weight_scale.data, self.compute_dtype, self.block)
            _set_param(layer, "weight", w)
            delattr(layer, "weight_scale")
            layer.linear_method = UnquantizedLinearMethod()
            return
        self._configure(layer)
