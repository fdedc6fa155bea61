"""Triton kernels for the GPU path: paged-decode attention (with split-K), the FP8-aware KV-cache
store, and FP8 weight dequantization. `dispatch.py` decides when they run; the plain-PyTorch
functions in refengine/attention/reference.py and quant/ are the fallback and the test oracle.

Nothing is imported here: on a CPU-only machine these modules load only when a test asks for
them under TRITON_INTERPRET=1 (Triton reads it when a kernel is decorated, i.e. at import)."""
