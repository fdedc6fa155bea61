"""FP8 quantization for the reference engine: weights (per-channel / block scales, online or from an
FP8 checkpoint), the precision policy, KV scale calibration. See docs/quantization.md.

A layer above the model (its linear methods plug into the model's layers); the E4M3 format and
the KV cache's storage rule, which the attention reference and the kernels use too, are a layer
below, in refengine/numerics. Nothing is imported here, so `import refengine.quant.<module>`
loads only what that module needs."""
