"""The CPU paged decode kernel with and without asking for the next tile's rows ahead, side by side.

A decode step calls the kernel once per layer, each on that layer's own cache, so by the time a layer
is read again (the next step) the other layers' caches and weights have evicted it: the engine reads
its KV cold. Here 8 layers of caches (the `tiny` model's shape: 16 query heads over 4 KV heads of 64)
hold `--sequences` sequences of `--context` tokens each in blocks scattered over twice the room they
need, and one "step" calls the kernel on each layer in turn, as the engine does; the arms
(refengine/kernels/cpu_paged_decode.py `PREFETCH` on and off) alternate, torch on one thread, and the
median step of each is kept. Run it pinned to one core, as a server runs:

    taskset -c 0 python bench/decode_prefetch.py --out bench/decode_prefetch.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, matmul_peak
from refengine.kernels import cpu_paged_decode

HEADS, KV_HEADS, HEAD_DIM, BLOCK, LAYERS = 16, 4, 64, 16, 8  # the `tiny` preset (refengine/model/tiny.py)


def measure(dtype: torch.dtype, sequences: int, context: int, rounds: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    blocks = -(-context // BLOCK)
    room = 2 * sequences * blocks
    caches = [torch.randn(2, room, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(dtype) for _ in range(LAYERS)]
    tables = [
        torch.randperm(room, generator=gen)[: sequences * blocks].to(torch.int32).reshape(sequences, blocks)
        for _ in range(LAYERS)
    ]
    lens = torch.full((sequences,), context, dtype=torch.int32)
    q = torch.randn(sequences, HEADS * HEAD_DIM, generator=gen)

    def step() -> float:
        t = time.perf_counter()
        for cache, table in zip(caches, tables):
            cpu_paged_decode.paged_decode_cpu(q, cache, table, lens, HEADS, HEAD_DIM**-0.5)
        return time.perf_counter() - t

    outputs = {}
    for on in (True, False):  # the same numbers either way: prefetching moves no arithmetic
        cpu_paged_decode.PREFETCH = on
        outputs[on] = cpu_paged_decode.paged_decode_cpu(q, caches[0], tables[0], lens, HEADS, HEAD_DIM**-0.5)
    if not torch.equal(outputs[True], outputs[False]):
        raise SystemExit("the kernel's output changed with the prefetch")
    samples: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            cpu_paged_decode.PREFETCH = on
            samples[on].append(step())
    cpu_paged_decode.PREFETCH = True
    kv_bytes = LAYERS * sequences * context * KV_HEADS * HEAD_DIM * 2 * caches[0].element_size()
    on, off = statistics.median(samples[True]), statistics.median(samples[False])
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "step_ms_prefetch": round(1e3 * on, 2),
        "step_ms_without": round(1e3 * off, 2),
        "speedup": round(off / on, 2),
        "gb_s_prefetch": round(kv_bytes / on / 1e9, 1),
        "gb_s_without": round(kv_bytes / off / 1e9, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=64, help="sequences decoding in the step")
    ap.add_argument("--context", type=int, default=270, help="tokens of context of each")
    ap.add_argument("--rounds", type=int, default=21, help="steps per arm, in alternating order")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not cpu_paged_decode.available():
        sys.exit("the CPU paged decode kernel is not available here (REFENGINE_CPU_KERNELS=0, or no compiler)")
    torch.set_num_threads(1)
    rows = [measure(dt, a.sequences, a.context, a.rounds) for dt in (torch.float32, torch.bfloat16)]
    peak = max(matmul_peak([(2048, 1024, 1024)]).values()) / 1e9  # the host's float32 rate, as RESULTS gives it
    out = {
        "command": " ".join(["python", *sys.argv]),
        "host": machine(),
        "matmul_f32_gflops": round(peak, 1),
        "args": vars(a),
        "rows": rows,
    }
    for r in rows:
        print(
            f"{r['dtype']}: {r['step_ms_prefetch']} ms a step with the prefetch, {r['step_ms_without']} without "
            f"({r['speedup']}x; {r['gb_s_prefetch']} against {r['gb_s_without']} GB/s of KV)"
        )
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
