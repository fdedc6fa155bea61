"""Tensor-parallel-ready linear layers (Megatron / vLLM style), running at world size 1 today.

Every layer knows its `tp_rank` and `tp_size` and owns only its shard of the full weight; its
`weight_loader(param, loaded_weight, shard_id=None)` narrows the full Hugging Face tensor to that
shard, so the loader never needs to know about parallelism.

- ColumnParallelLinear: the output dim is split; each rank computes a slice of the outputs.
- MergedColumnParallelLinear: several column-parallel outputs in one matmul (gate_proj + up_proj).
- QKVParallelLinear: q, k, v in one matmul; heads are split, and when tp_size > num_kv_heads each
  KV head is replicated on tp_size / num_kv_heads ranks (GQA with few KV heads).
- RowParallelLinear: the input dim is split; each rank produces a partial sum of the full output,
  summed by `tp_all_reduce` (refengine/parallel/tp_ops.py; a no-op at tp_size 1). The bias is
  added once, after the sum.

How the matmul is done is delegated to a `LinearMethod` (the quantization hook): it creates the
weight parameters and applies them. `UnquantizedLinearMethod` is a plain F.linear; FP8 plugs in
here later without touching the model. On CPU in float32 the unquantized method runs through
oneDNN with the weight packed once (cpu_gemm.py: faster at decode batch sizes).
"""

from __future__ import annotations

import torch
from torch import nn

from refengine.errors import RefEngineError
from refengine.model.layers import cpu_gemm
from refengine.model.layers.weight_utils import attach_weight_loader, copy_weight
from refengine.parallel.tp_ops import tp_all_gather, tp_all_reduce


def divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise RefEngineError(f"{what} ({numerator}) is not divisible by tensor_parallel_size ({denominator})")
    return numerator // denominator


# --- the quantization hook ---------------------------------------------------------------------


class LinearMethod:
    """How a linear layer stores and applies its weight. Subclass for quantized formats."""

    def create_weights(
        self,
        layer: nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
    ) -> None:
        raise NotImplementedError

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Called once after all weights are loaded (e.g. to quantize or repack). Default: nothing."""


class UnquantizedLinearMethod(LinearMethod):
    def create_weights(
        self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size, params_dtype
    ):
        # torch.empty, not an initializer: every value is overwritten by the loader.
        weight = nn.Parameter(
            torch.empty(sum(output_partition_sizes), input_size_per_partition, dtype=params_dtype), requires_grad=False
        )
        attach_weight_loader(weight, layer.weight_loader)
        layer.register_parameter("weight", weight)
        layer.packed_weight = cpu_gemm.PackedWeight()

    def apply(self, layer, x, bias=None):
        # float32 on CPU: oneDNN with the weight packed once (cpu_gemm.py); F.linear elsewhere.
        return cpu_gemm.linear(x, layer.weight, bias, layer.packed_weight)


# --- layers ------------------------------------------------------------------------------------


class LinearBase(nn.Module):
    # Registered by the linear method's create_weights and by _make_bias; declared for the type checker.
    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        linear_method: LinearMethod | None = None,
        params_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.linear_method = linear_method or UnquantizedLinearMethod()
        self.params_dtype = params_dtype or torch.get_default_dtype()

    def _make_bias(self, size: int, bias: bool) -> None:
        if bias:
            b = nn.Parameter(torch.empty(size, dtype=self.params_dtype), requires_grad=False)
            attach_weight_loader(b, self.weight_loader)
            self.register_parameter("bias", b)
        else:
            self.register_parameter("bias", None)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
        raise NotImplementedError


class ColumnParallelLinear(LinearBase):
    """y = x W^T + b with W split by rows (output features) across ranks."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False, gather_output: bool = False, **kw):
        super().__init__(input_size, output_size, **kw)
        self.gather_output = gather_output
        self.output_size_per_partition = divide(output_size, self.tp_size, "output size")
        self.linear_method.create_weights(
            self, input_size, self.output_partition_sizes(), input_size, output_size, self.params_dtype
        )
        self._make_bias(self.output_size_per_partition, bias)

    def output_partition_sizes(self) -> list[int]:
        return [self.output_size_per_partition]

    def weight_loader(self, param, loaded_weight, shard_id=None):
        size = param.shape[0]
        copy_weight(param.data, loaded_weight.narrow(0, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_method.apply(self, x, self.bias)
        return tp_all_gather(y, self.tp_size) if self.gather_output else y


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel projections of the same input fused into one matmul.

    Each rank's weight is [shard of output 0; shard of output 1; ...], so the output splits
    cleanly into the per-projection pieces (SiluAndMul splits gate_up in half)."""

    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False, **kw):
        self.output_sizes = list(output_sizes)
        super().__init__(input_size, sum(output_sizes), bias=bias, **kw)

    def output_partition_sizes(self) -> list[int]:
        return [divide(s, self.tp_size, "merged output size") for s in self.output_sizes]

    def weight_loader(self, param, loaded_weight, shard_id=None):
        if shard_id is None:  # already-fused checkpoint tensor
            return super().weight_loader(param, loaded_weight)
        sizes = self.output_partition_sizes()
        offset, size = sum(sizes[:shard_id]), sizes[shard_id]
        copy_weight(param.data.narrow(0, offset, size), loaded_weight.narrow(0, self.tp_rank * size, size))


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections fused; shard_id is "q", "k" or "v"."""

    def __init__(
        self,
        hidden_size: int,
        head_size: int,
        total_num_heads: int,
        total_num_kv_heads: int | None = None,
        bias: bool = False,
        **kw,
    ):
        tp_size = kw.get("tp_size", 1)
        total_num_kv_heads = total_num_kv_heads or total_num_heads
        self.head_size = head_size
        self.num_heads = divide(total_num_heads, tp_size, "num_attention_heads")
        if tp_size >= total_num_kv_heads:
            # Fewer KV heads than ranks: each rank keeps one KV head, shared by tp/kv ranks.
            self.num_kv_heads = 1
            self.num_kv_head_replicas = divide(tp_size, total_num_kv_heads, "KV head replication")
        else:
            self.num_kv_heads = divide(total_num_kv_heads, tp_size, "num_key_value_heads")
            self.num_kv_head_replicas = 1
        # Full-size output as if unsharded, so ColumnParallelLinear's per-rank size is right.
        output_size = (self.num_heads + 2 * self.num_kv_heads) * tp_size * head_size
        super().__init__(hidden_size, output_size, bias=bias, **kw)

    def output_partition_sizes(self) -> list[int]:
        q, kv = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        return [q, kv, kv]

    def weight_loader(self, param, loaded_weight, shard_id=None):
        if shard_id is None:
            raise RefEngineError("a fused qkv_proj checkpoint tensor is not supported; expected q_proj/k_proj/v_proj")
        q, kv = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        if shard_id == "q":
            offset, size, rank_chunk = 0, q, self.tp_rank
        else:
            offset = q if shard_id == "k" else q + kv
            size, rank_chunk = kv, self.tp_rank // self.num_kv_head_replicas
        copy_weight(param.data.narrow(0, offset, size), loaded_weight.narrow(0, rank_chunk * size, size))


class RowParallelLinear(LinearBase):
    """y = x W^T + b with W split by columns (input features); partial sums are all-reduced."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False, reduce_results: bool = True, **kw):
        super().__init__(input_size, output_size, **kw)
        self.reduce_results = reduce_results
        self.input_size_per_partition = divide(input_size, self.tp_size, "input size")
        self.linear_method.create_weights(
            self, self.input_size_per_partition, [output_size], input_size, output_size, self.params_dtype
        )
        self._make_bias(output_size, bias)

    def weight_loader(self, param, loaded_weight, shard_id=None):
        if param.dim() == 1:  # the bias is not split: it is added once, after the sum
            return copy_weight(param.data, loaded_weight)
        size = param.shape[1]
        copy_weight(param.data, loaded_weight.narrow(1, self.tp_rank * size, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_method.apply(self, x)
        if self.reduce_results:
            y = tp_all_reduce(y, self.tp_size)
        if self.bias is not None:
            y = y + self.bias
        return y
