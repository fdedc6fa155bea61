"""Is an engine step slower on a worker thread than on the main thread of the same process?

The server steps the engine on a thread of its own (refengine/server/engine_loop.py), the offline
`LLM.generate` and the planner's calibration on the main thread. Here one engine, in one process,
runs the same steps alternately on the main thread and on a fresh worker thread (ABAB, --reps
times): a lone prefill (the first step of a request) at each prompt length, and the decode steps
that follow it. Medians per arm; the ratio is worker / main.

    python bench/engine_thread.py [--model tiny] [--prompts 128,512] [--reps 6] [--out FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from common import machine, print_table, write_json  # noqa: E402

from refengine import LLM, SamplingParams  # noqa: E402

DECODE_STEPS = 8


def one_request(engine, prompt_len: int, rng: random.Random, tag: str) -> tuple[float, float]:
    """(first step s, median decode step s) of one request alone in the engine."""
    params = SamplingParams(max_tokens=DECODE_STEPS + 1, ignore_eos=True, temperature=0)
    engine.add_request([rng.randrange(10, 4000) for _ in range(prompt_len)], params, request_id=tag)
    t = time.perf_counter()
    engine.step()
    first = time.perf_counter() - t
    decode = []
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        engine.step()
        decode.append(time.perf_counter() - t)
    return first, statistics.median(decode)


def on_worker(fn, *args):
    out: list = []
    th = threading.Thread(target=lambda: out.append(fn(*args)))
    th.start()
    th.join()
    return out[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="a preset or a checkpoint directory")
    p.add_argument("--prompts", default="128,512", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--reps", type=int, default=6, help="requests per arm and prompt length, alternating")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    llm = LLM(model=a.model, max_model_len=1024)
    engine = llm.llm_engine
    rng = random.Random(0)
    one_request(engine, a.prompts[0], rng, "warm-up")
    samples: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for n in a.prompts:
        for rep in range(a.reps):
            for arm in ("main", "worker") if rep % 2 == 0 else ("worker", "main"):
                tag = f"{arm}-{n}-{rep}"
                got = one_request(engine, n, rng, tag) if arm == "main" else on_worker(one_request, engine, n, rng, tag)
                samples.setdefault((n, arm), []).append(got)
    rows, table = [], []
    for n in a.prompts:
        med = {arm: [statistics.median(x[i] for x in samples[(n, arm)]) for i in (0, 1)] for arm in ("main", "worker")}
        row = {
            "prompt": n,
            "prefill_ms": {arm: med[arm][0] * 1e3 for arm in med},
            "decode_step_ms": {arm: med[arm][1] * 1e3 for arm in med},
        }
        rows.append(row)
        table.append(
            [n]
            + [f"{row['prefill_ms'][arm]:.1f}" for arm in ("main", "worker")]
            + [f"{row['prefill_ms']['worker'] / row['prefill_ms']['main']:.2f}"]
            + [f"{row['decode_step_ms'][arm]:.2f}" for arm in ("main", "worker")]
            + [f"{row['decode_step_ms']['worker'] / row['decode_step_ms']['main']:.2f}"]
        )
    print_table(
        f"{a.model}: one engine, steps on the main thread and on a worker thread ({a.reps} each, medians; "
        f"torch threads {torch.get_num_threads()})",
        ["prompt", "prefill main ms", "worker ms", "ratio", "decode main ms", "worker ms", "ratio"],
        table,
    )
    write_json(
        a.out,
        {
            "bench": "engine_thread",
            "args": vars(a),
            "machine": machine(),
            "rows": rows,
            "samples": {f"{k[0]}-{k[1]}": v for k, v in samples.items()},
        },
    )


if __name__ == "__main__":
    main()
