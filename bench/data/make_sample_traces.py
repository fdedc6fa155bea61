"""Generate the small sample traces shipped in bench/data/ (nothing is downloaded).

sample_mooncake.jsonl: Mooncake's JSONL format (timestamp ms, input_length, output_length,
hash_ids of 512-token blocks). Requests belong to a few "documents" whose leading blocks they
share (a system prompt and a document, as in Mooncake's traces), then blocks of their own.
sample_azure.csv: the Azure LLM inference trace's CSV (TIMESTAMP, ContextTokens, GeneratedTokens).
Arrivals are Poisson at `--rate` requests/s. Deterministic: the same files every run.

Run: python bench/data/make_sample_traces.py [--n 60] [--rate 4] [--out bench/data]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

BLOCK = 512


def mooncake_rows(n: int, rate: float, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    t, rows, next_id = 0.0, [], 1000
    docs = [list(range(d * 100, d * 100 + rng.randint(1, 4))) for d in range(5)]  # shared leading blocks
    for _ in range(n):
        t += rng.expovariate(rate)
        shared = docs[rng.randrange(len(docs))]
        own = list(range(next_id, next_id + rng.randint(0, 2)))
        next_id += len(own)
        blocks = shared + own
        input_len = (len(blocks) - 1) * BLOCK + rng.randint(16, BLOCK)
        rows.append(
            {
                "timestamp": int(round(t * 1000)),
                "input_length": input_len,
                "output_length": rng.randint(8, 256),
                "hash_ids": blocks,
            }
        )
    return rows


def azure_rows(n: int, rate: float, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    t0 = datetime(2023, 11, 16, 18, 15, 46)
    t, rows = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        stamp = (t0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 digits, as Azure's
        rows.append(
            {"TIMESTAMP": stamp, "ContextTokens": rng.randint(32, 2048), "GeneratedTokens": rng.randint(8, 300)}
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    a = ap.parse_args()
    with open(a.out / "sample_mooncake.jsonl", "w") as f:
        for row in mooncake_rows(a.n, a.rate):
            f.write(json.dumps(row) + "\n")
    with open(a.out / "sample_azure.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        w.writeheader()
        w.writerows(azure_rows(a.n, a.rate))


if __name__ == "__main__":
    main()
