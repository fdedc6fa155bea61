"""Kernels. For the GPU path, Triton: paged-decode attention (with split-K), the FP8-aware KV-cache
store, and FP8 weight dequantization. For the CPU path, small C++ kernels read through ctypes
(`cpu_paged_decode.py`, `cpu_layer_ops.py`; built once with the system compiler by `cpu_build.py`,
the PyTorch path otherwise). `dispatch.py` decides when they run; the plain-PyTorch
functions in refengine/attention/reference.py and quant/ are the fallback and the test oracle.

Nothing is imported here: on a CPU-only machine these modules load only when a test asks for
them under TRITON_INTERPRET=1 (Triton reads it when a kernel is decorated, i.e. at import)."""
