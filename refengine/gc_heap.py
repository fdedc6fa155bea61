"""Freeze the heap a serving process built at start-up out of the garbage collector's reach.

CPython's full (generation 2) collection walks every container object the process holds. A server
holds hundreds of thousands that live as long as it does and are never garbage: the block pool's
`KVCacheBlock`s alone are one per KV block (131,072 for tiny-test on this machine's default cache),
plus the model's modules and the web framework. One full collection of that heap took 102 ms here
while it freed nothing, on the thread that held the GIL: every stream stalls until it ends, and a
level that one lands in has it as its P99 (docs/server.md, "Garbage-collector pauses";
bench/gc_pauses.py).

`gc.freeze()` moves everything alive into a permanent generation that collections skip; what the
process allocates afterwards is collected as before. vLLM does the same once its model has warmed up.
Only a process that serves one engine for its whole life may call this: frozen objects that later
become cyclic garbage are never freed, so a process that builds and drops engines (a test session,
a notebook) would keep each one.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_heap(context: str) -> int:
    """Collect what start-up left behind, then freeze the rest; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d start-up objects frozen out of the garbage collector's full collections", context, frozen)
    return frozen
