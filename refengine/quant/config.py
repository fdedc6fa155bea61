"""QuantConfig: resolves the user's flags and the checkpoint's own format into a precision policy,
and installs the right `LinearMethod` on every linear layer of a freshly built model.

`prepare_model` runs between building the model and loading its weights (loader.load_model):
each `LinearBase` is named by its place in the module tree, the policy decides FP8 or not, and
the layer gets its method (see fp8_linear.py for what each one does with the weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from refengine.errors import RefEngineError
from refengine.model.layers.linear import LinearBase
from refengine.numerics.kv_cache import resolve_kv_cache_dtype
from refengine.quant.checkpoint import CheckpointFp8Format, read_checkpoint_format
from refengine.quant.fp8_linear import Fp8CheckpointLinearMethod, Fp8OnlineLinearMethod
from refengine.quant.fp8_matmul import w8a8_supported
from refengine.quant.policy import PrecisionPolicy, parse_skip

QUANTIZATIONS = ("fp8",)
ONLINE_SCALES = ("channel", "block")


@dataclass
class QuantConfig:
    policy: PrecisionPolicy
    checkpoint: CheckpointFp8Format | None
    compute_dtype: torch.dtype
    device: torch.device
    # CPU keeps a dequantized copy (fp8_matmul.py explains the measurement); GPUs do not.
    cache_dequantized: bool
    use_w8a8: bool

    @classmethod
    def resolve(
        cls,
        quantization: str | None,
        weight_scales: str,
        skip: str | None,
        kv_cache_dtype: str,
        calculate_kv_scales: bool,
        model_dir: str | Path,
        compute_dtype: torch.dtype,
        device: torch.device,
    ) -> "QuantConfig":
        if quantization in ("", "none"):
            quantization = None
        if quantization is not None and quantization not in QUANTIZATIONS:
            raise RefEngineError(f"quantization must be one of {QUANTIZATIONS} (or unset), got {quantization!r}")
        if weight_scales not in ONLINE_SCALES:
            raise RefEngineError(f"fp8 weight scales must be one of {ONLINE_SCALES}, got {weight_scales!r}")
        resolve_kv_cache_dtype(kv_cache_dtype, compute_dtype)  # validates the name
        if calculate_kv_scales and kv_cache_dtype == "auto":
            raise RefEngineError("calculate_kv_scales measures FP8 KV scales; it needs kv_cache_dtype fp8")
        checkpoint = read_checkpoint_format(model_dir)
        if checkpoint is not None:
            quantization = "fp8"  # an FP8 checkpoint is FP8 whether or not the flag says so (as vLLM)
            weight_scales = checkpoint.kind
        skip_patterns = parse_skip(skip)
        if skip_patterns and quantization is None:
            raise RefEngineError(
                "quantization_skip names modules to keep unquantized, but quantization is off; add --quantization fp8"
            )
        policy = PrecisionPolicy(
            quantization=quantization, weight_scales=weight_scales, skip=skip_patterns, kv_cache_dtype=kv_cache_dtype
        )
        return cls(
            policy,
            checkpoint,
            compute_dtype,
            device,
            cache_dequantized=device.type == "cpu",
            use_w8a8=w8a8_supported(device),
        )

    @property
    def enabled(self) -> bool:
        return self.policy.quantization is not None

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Give every linear layer its method, per the policy (before weights are loaded)."""
        if not self.enabled:
            return
        kw = {"cache_dequantized": self.cache_dequantized, "use_w8a8": self.use_w8a8}
        for name, module in model.named_modules():
            if not isinstance(module, LinearBase):
                continue
            fp8 = self.policy.decide(name)
            if self.checkpoint is None:
                if fp8:
                    module.linear_method = Fp8OnlineLinearMethod(self.policy.weight_scales, **kw)
            elif self.checkpoint.is_quantized(name):
                method = Fp8CheckpointLinearMethod(
                    self.checkpoint.scale_name,
                    self.checkpoint.kind,
                    self.checkpoint.block,
                    upcast=not fp8,
                    compute_dtype=self.compute_dtype,
                    **kw,
                )
                method.install(module)
                module.linear_method = method
            else:
                fp8 = False  # the checkpoint left it in full precision; it stays that way
            self.policy.record(name, fp8)
        unused = self.policy.unused_patterns()
        if unused:
            raise RefEngineError(
                f"quantization_skip pattern(s) {', '.join(unused)} match no linear layer; "
                f"layers are named like {self.policy.kinds(self.policy.quantized)[:4]}"
            )
