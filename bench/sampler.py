"""What sampling a step's tokens costs: refengine's sampler (every sampled row at once, by inverse
transform: one uniform number per row) beside torch.multinomial one row at a time (what refengine
did before, and what draws a random number per vocabulary entry), in one run, alternating.

At temperature 1 (the OpenAI API's default, so every sweep that does not ask for greedy decoding),
rows x vocabulary: median milliseconds per step's sampling, and the ratio.

    python bench/sampler.py [--rows 1,16,64] [--vocab 4096,32000,128256] [--out bench/sampler.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, print_table, write_json  # noqa: E402
from refengine.runner.sampler import Sampler, SamplingRow  # noqa: E402
from refengine.sampling_params import SamplingParams  # noqa: E402

REPEATS = 15


def per_row_multinomial(logits: torch.Tensor, rows: list[SamplingRow], gen: torch.Generator) -> list[int]:
    """The baseline: softmax and torch.multinomial for each row in turn (temperature only)."""
    out = []
    for i, row in enumerate(rows):
        probs = torch.softmax(logits[i].float() / row.params.temperature, dim=-1)
        out.append(int(torch.multinomial(probs, 1, generator=gen).item()))
    return out


def _median_ms(fn) -> float:
    fn()  # warm-up
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,16,64")
    ap.add_argument("--vocab", default="4096,32000,128256")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sampler, gen = Sampler(0, torch.device("cpu")), torch.Generator().manual_seed(0)
    results, table = [], []
    for vocab in (int(v) for v in a.vocab.split(",")):
        for n in (int(r) for r in a.rows.split(",")):
            logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(n + vocab)) * 3
            rows = [SamplingRow(f"r{i}", SamplingParams(temperature=1.0), 0, None) for i in range(n)]
            batched = _median_ms(lambda logits=logits, rows=rows: sampler(logits, rows))
            one_by_one = _median_ms(lambda logits=logits, rows=rows: per_row_multinomial(logits, rows, gen))
            results.append(dict(vocab=vocab, rows=n, batched_ms=batched, per_row_multinomial_ms=one_by_one))
            table.append([vocab, n, f"{batched:.3f}", f"{one_by_one:.3f}", f"{one_by_one / batched:.1f}x"])
    print_table(
        "sampling one step's tokens at temperature 1, median ms",
        ["vocab", "rows", "refengine (inverse transform, batched)", "multinomial per row", "speed-up"],
        table,
    )
    write_json(a.out, {"bench": "sampler", "args": vars(a), "machine": machine(), "results": results})


if __name__ == "__main__":
    main()
