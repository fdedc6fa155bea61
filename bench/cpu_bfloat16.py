"""What each bfloat16 CPU path buys refengine, side by side in one process.

On a CPU that computes bfloat16 natively (AVX-512 BF16, AMX), refengine packs bfloat16 linears for
oneDNN (model/layers/cpu_gemm.py) and runs CPU attention in bfloat16 (attention/reference.py).
Here one `tiny` engine in bfloat16 measures, arm after arm in alternating order (ABCCBA ...):

- both: the defaults;
- no packing: bfloat16 linears through F.linear (`cpu_gemm.ENABLED = False`);
- float32 attention: CPU attention converts the gathered context to float32 first, as it did before.

Per arm, the median decode step at each batch (every sequence with a prompt of --prompt tokens,
prefilled first) and the median prefill step of --prefill-batch such prompts at once.

    python bench/cpu_bfloat16.py [--batches 1,16,64] [--prompt 256] [--reps 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from common import machine, print_table, write_json  # noqa: E402

from refengine import LLM, SamplingParams  # noqa: E402
from refengine.attention import reference  # noqa: E402
from refengine.model.layers import cpu_gemm  # noqa: E402
from refengine.numerics.cpu_bfloat16 import cpu_computes_bfloat16  # noqa: E402

ARMS = ("both", "no packing", "float32 attention")
DECODE_STEPS = 10


@contextmanager
def arm(name: str):
    packed, keeps = cpu_gemm.ENABLED, reference._cpu_keeps
    cpu_gemm.ENABLED = name != "no packing"
    if name == "float32 attention":
        reference._cpu_keeps = lambda dtype: dtype == torch.float32
    try:
        yield
    finally:
        cpu_gemm.ENABLED, reference._cpu_keeps = packed, keeps


def _add(engine, n: int, prompt: int, max_tokens: int, rng: random.Random) -> None:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
    for _ in range(n):
        engine.add_request([rng.randrange(10, 4000) for _ in range(prompt)], params, request_id=f"r{rng.random()}")


def decode_step_s(engine, batch: int, prompt: int, rng: random.Random) -> float:
    """Median decode step of `batch` sequences, after their prefills."""
    _add(engine, batch, prompt, DECODE_STEPS + 2, rng)
    sched = engine.scheduler
    while sched.waiting or any(r.num_computed_tokens < len(r.prompt_token_ids) for r in sched.running):
        engine.step()
    steps = []
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - t)
    return statistics.median(steps[:-1] or steps)  # the last step only finishes


def prefill_step_s(engine, batch: int, prompt: int, rng: random.Random) -> float:
    """The first step of `batch` prompts added at once (as much prefill as the token budget takes)."""
    _add(engine, batch, prompt, 1, rng)
    t = time.perf_counter()
    engine.step()
    took = time.perf_counter() - t
    while engine.has_unfinished_requests():
        engine.step()
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,16,64", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--prefill-batch", type=int, default=8)
    p.add_argument("--reps", type=int, default=4, help="measurements per arm and shape, in alternating order")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if not cpu_computes_bfloat16():
        raise SystemExit("this CPU does not compute bfloat16 natively (no AVX-512 BF16 or AMX): nothing to compare")
    engine = LLM(model="tiny", dtype="bfloat16", max_model_len=1024).llm_engine
    rng = random.Random(0)
    decode_step_s(engine, 2, 64, rng)  # warm-up
    shapes = [("decode", b) for b in a.batches] + [("prefill", a.prefill_batch)]
    samples: dict[str, list[float]] = {}
    for rep in range(a.reps):
        order = ARMS if rep % 2 == 0 else tuple(reversed(ARMS))
        for kind, batch in shapes:
            for name in order:
                with arm(name):
                    fn = decode_step_s if kind == "decode" else prefill_step_s
                    samples.setdefault(f"{kind} {batch}|{name}", []).append(fn(engine, batch, a.prompt, rng))
    rows, table = [], []
    for kind, batch in shapes:
        med = {name: statistics.median(samples[f"{kind} {batch}|{name}"]) * 1e3 for name in ARMS}
        rows.append({"step": kind, "batch": batch, "prompt": a.prompt, "median_ms": med})
        table.append([f"{kind} x{batch}", *(f"{med[n]:.1f}" for n in ARMS)])
    print_table(
        f"tiny, bfloat16, {a.prompt}-token prompts: median step ms ({a.reps} per arm, alternating; "
        f"torch threads {torch.get_num_threads()})",
        ["step", *ARMS],
        table,
    )
    write_json(
        a.out,
        {"bench": "cpu_bfloat16", "args": vars(a), "machine": machine(), "rows": rows, "samples_s": samples},
    )


if __name__ == "__main__":
    main()
