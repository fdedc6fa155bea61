"""FP8 quantization for the reference engine: weights (E4M3, per-channel / block scales, online or
from an FP8 checkpoint), the precision policy, and the FP8 KV cache. See docs/quantization.md.

Nothing is imported here on purpose: the attention reference imports quant.kv_cache and
quant.config imports the linear layers, so an eager package import would pull the model layers
into every `import refengine.quant.<module>` (and back into the layers that import quant)."""
