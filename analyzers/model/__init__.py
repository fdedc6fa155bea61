"""Model shapes (built-in presets and Hugging Face configs) and the memory they need: weights, KV cache, activations, buffers."""
