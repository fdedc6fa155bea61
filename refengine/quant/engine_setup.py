"""The engine's FP8 steps after the model is loaded: KV scale calibration and memory accounting.

Kept here so the engine needs three lines for quantization, not thirty."""

from __future__ import annotations

import logging

import torch

from refengine.numerics.kv_cache import is_fp8, kv_cache_bytes_per_token
from refengine.quant.kv_calibration import CALIBRATION_TEXTS, calibrate_kv_scales
from refengine.quant.memory import QuantMemoryReport, weight_bytes

log = logging.getLogger("refengine.quant")


def calibration_prompts(tokenizer, vocab_size: int) -> list[list[int]]:
    """The built-in calibration texts, tokenized; seeded random ids for a model without a tokenizer."""
    if tokenizer is not None:
        return [tokenizer.encode(t) for t in CALIBRATION_TEXTS]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab_size, (48,), generator=g).tolist() for _ in CALIBRATION_TEXTS]


def finish_quantized_model(engine, model) -> QuantMemoryReport:
    """Calibrate FP8 KV scales if asked, log the precision policy, and account the bytes saved."""
    args, cfg = engine.args, engine.model_config
    if args.calculate_kv_scales and is_fp8(engine.kv_cache_dtype):
        scales = calibrate_kv_scales(
            model, calibration_prompts(engine.tokenizer, cfg.vocab_size), args.block_size, engine.device, engine.dtype
        )
        log.info("calibrated FP8 KV scales (k, v) per layer: %s", ", ".join(f"({k:.3g}, {v:.3g})" for k, v in scales))
    stored, unquantized, cache = weight_bytes(model, engine.dtype, engine.quant.cache_dequantized)
    tp = getattr(args, "tensor_parallel_size", 1)
    report = QuantMemoryReport(
        weight_bytes=stored,
        weight_bytes_unquantized=unquantized,
        dequant_cache_bytes=cache,
        kv_bytes_per_token=kv_cache_bytes_per_token(cfg, engine.kv_cache_dtype, tp_size=tp),
        kv_bytes_per_token_unquantized=kv_cache_bytes_per_token(cfg, engine.dtype, tp_size=tp),
        num_kv_blocks=engine.cache_config.num_blocks,
        num_kv_blocks_unquantized=engine.num_kv_blocks(engine.dtype),
    )
    log.info(engine.quant.policy.summary())
    log.info("memory: %s", report.summary())
    return report
