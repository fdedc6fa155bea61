"""A serving process takes what it built at start-up out of the garbage collector's full collections
(refengine/gc_heap.py): a full collection walking the block pool's blocks mid-serving stalled every
stream for 120-250 ms. Each check runs in a process of its own, since a frozen heap is never freed."""

from __future__ import annotations

import subprocess
import sys
import threading

from refengine_proc import free_port, wait_healthy

FROZEN_LOG = "start-up objects frozen"


def test_freezing_takes_a_block_pool_out_of_full_collections():
    code = """
import gc
from refengine.core.block_pool import BlockPool, KVCacheBlock
from refengine.gc_heap import freeze_startup_heap
pool = BlockPool(5000)
gc.collect()
def in_gen2():
    return sum(isinstance(o, KVCacheBlock) for o in gc.get_objects(generation=2))
before = in_gen2()
frozen = freeze_startup_heap("test")
print(before, in_gen2(), frozen)
del pool
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    before, after, frozen = map(int, out.stdout.split())
    assert before >= 5000, "the blocks live in the oldest generation before the freeze"
    assert after == 0, "a full collection no longer walks them"
    assert frozen >= 5000


def test_a_served_engine_freezes_its_start_up_heap_before_it_serves():
    port = free_port()
    cmd = [sys.executable, "-m", "refengine.server", "--model", "tiny-test", "--port", str(port)]
    cmd += ["--max-model-len", "256", "--log-level", "info"]  # the freeze is logged at info
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(120, proc.kill)  # bounds the read below if the line never comes
    killer.start()
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        lines = []
        for line in proc.stdout:  # the freeze is logged before uvicorn starts, so before /health answered
            lines.append(line)
            if FROZEN_LOG in line or "Uvicorn running" in line:
                break
        frozen = [line for line in lines if FROZEN_LOG in line]
        assert frozen, "".join(lines)
        count = int(frozen[0].split(FROZEN_LOG)[0].split()[-1])
        assert count > 10_000, frozen[0]  # the engine, its block pool and the web framework
    finally:
        killer.cancel()
        proc.kill()
        proc.wait()
