"""A bursty trace for bench/plan_accuracy.py, in Mooncake's JSONL format (loadgen/trace.py reads it).

Seeded, so every layout and model replays the same shape of traffic scaled to its own capacity:
arrivals in bursts (gamma gaps of shape 0.3: the coefficient of variation about 1.8, burstier than
Poisson), prompts of 64 to 512 tokens (log-uniform), outputs of 16 to 64, and a third of the
requests opening with one of four shared 256-token prefixes (hash ids, so prefix caching has
something to find, as in a production trace).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

GAP_SHAPE = 0.3  # gamma shape of inter-arrival gaps: < 1 is burstier than Poisson
BLOCK = 128  # tokens per hash id (passed to the sweep as --block-size)
SHARED_PREFIX_BLOCKS = 2  # a shared prefix: 2 blocks of 128 tokens
SHARED_SHARE = 1 / 3
PREFIXES = 4


def mean_output_len() -> float:
    return (16 + 64) / 2


def write_bursty_trace(path: Path, rate: float, span_s: float, seed: int) -> int:
    """Requests at `rate` per second on average over `span_s`; returns how many were written."""
    if not rate > 0 or not span_s > 0:
        raise ValueError("a trace needs a positive rate and span")
    rng = np.random.default_rng(seed)
    t, rows, unique = 0.0, [], 10_000
    while True:
        t += rng.gamma(GAP_SHAPE, 1.0 / (rate * GAP_SHAPE))
        if t > span_s:
            break
        n_in = int(round(np.exp(rng.uniform(np.log(64), np.log(512)))))
        blocks = -(-n_in // BLOCK)
        hash_ids: list[int] = []
        if rng.random() < SHARED_SHARE and blocks > SHARED_PREFIX_BLOCKS:
            group = int(rng.integers(PREFIXES))
            hash_ids = [group * 100 + b for b in range(SHARED_PREFIX_BLOCKS)]
        while len(hash_ids) < blocks:
            hash_ids.append(unique)
            unique += 1
        rows.append(
            {
                "timestamp": round(t * 1000, 3),
                "input_length": n_in,
                "output_length": int(rng.integers(16, 65)),
                "hash_ids": hash_ids,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)
