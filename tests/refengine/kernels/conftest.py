"""Kernel tests run Triton's interpreter on CPU (TRITON_INTERPRET=1) and the real compiler on a GPU.

Triton reads TRITON_INTERPRET when a @triton.jit function is decorated, i.e. when the kernel
module is imported, so it is set here (before the test modules import the kernels) and any
kernel module imported earlier without it is reloaded.
"""

import importlib
import os
import sys

import torch

KERNEL_MODULES = ("refengine.kernels.paged_decode", "refengine.kernels.kv_store", "refengine.kernels.fp8_dequant")

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    for name in KERNEL_MODULES:
        if name in sys.modules:
            importlib.reload(sys.modules[name])

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
