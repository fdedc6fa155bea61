"""Keep glibc from handing big tensors' memory back to the OS after every op.

A decode step allocates and frees many multi-megabyte buffers (gathered K/V, MLP activations).
Past glibc's mmap threshold each one is a fresh mmap whose pages fault in on first touch: we
measured ~127k minor page faults per decode step of the `tiny` model at 64 sequences. Raising the
mmap threshold to its 64-bit maximum and the trim threshold keeps those buffers on the heap,
where they are reused (2 faults per step). Process-wide, so the engine does it once at start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's cap on 64-bit (4 MiB * sizeof(long))
_TRIM_THRESHOLD = 1 << 30
_done = False


def keep_freed_memory_on_heap() -> bool:
    """Apply once per process on Linux/glibc; returns whether the setting is in force."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = (
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
            and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1
        )
    except (OSError, AttributeError):
        return False
    _done = ok
    if not ok:
        log.info("mallopt refused the allocator settings; decode steps will page-fault more")
    return ok
