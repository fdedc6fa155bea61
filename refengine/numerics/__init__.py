"""The number formats tensors are stored in: FP8 E4M3 and its scales (fp8.py), and the KV cache's
storage dtype, byte size and store/load rule (kv_cache.py). See docs/quantization.md.

The lowest layer of the engine's tensors: the attention reference, the kernels, the model and
quant all import it, and it imports nothing of the engine but its error type."""
