"""Does the planner's decode attention price carry to layouts it was not calibrated at?

The step model prices one decode attention call from the machine profile (analyzers/plan/
decode_attention.py). This bench holds three ways of calibrating that price against refengine's
`Attention` layer decoding a seeded, randomized family of shapes none of them was fitted to: heads,
GQA ratio, head dim, batch and context drawn at random.

- `one price, hot`: what profiles had before: one price per KV element, fitted at one layout (16
  heads, 4 KV heads, head dim 64), each point timed over and over on one cache;
- `one price, cold`: the same line, each point rotating through distinct caches (isolates the cache);
- `three prices`: KV elements, query elements and scores, at three layouts, rotating, with the
  kernel's split over threads (what `llmdiag calibrate` measures now).

The truth for each drawn shape is the layer's call rotating through distinct caches (up to 256 MiB
of them), as an engine step's layers each read their own context after every weight has passed
through the CPU's caches; bench/step_model_vs_engine.py holds the whole step model to the engine.

    python bench/decode_attention_model.py [--draws 40] [--seed 0] [--out JSON]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, matmul_peak, print_table, write_json  # noqa: E402

HEADS = (4, 8, 12, 16, 32)
GQA_RATIOS = (1, 2, 4, 8)
HEAD_DIMS = (32, 64, 80, 128)
MAX_CALL_BYTES = 256 << 20  # a drawn call's context at most this (a batch of 64 x 4,096 tokens is not)


@dataclasses.dataclass(frozen=True)
class Draw:
    heads: int
    kv_heads: int
    head_dim: int
    batch: int
    context: int

    @property
    def kv_elements(self) -> float:
        return 2.0 * self.batch * self.context * self.kv_heads * self.head_dim

    @property
    def scores(self) -> float:
        return float(self.batch) * self.context * self.heads


def draw(rng: random.Random) -> Draw:
    while True:
        heads = rng.choice(HEADS)
        ratio = rng.choice([r for r in GQA_RATIOS if heads % r == 0])
        d = Draw(
            heads,
            heads // ratio,
            rng.choice(HEAD_DIMS),
            round(math.exp(rng.uniform(0, math.log(64)))),
            round(math.exp(rng.uniform(math.log(32), math.log(4096)))),
        )
        if d.kv_elements * 4 <= MAX_CALL_BYTES:
            return d


def one_price(grid, cold: bool):
    """The old calibration: one layout, a line through KV elements; hot (one cache) or cold (rotating)."""
    from analyzers.plan.calibrate.attention import _attention, caches_for
    from analyzers.plan.profile import LinearCost

    xs, ys = [], []
    for b in grid.decode_batches:
        for ctx in grid.decode_contexts:
            kv = 2.0 * b * ctx * grid.kv_heads * grid.head_dim
            xs.append(kv)
            ys.append(_attention(grid, [(ctx - 1, 1)] * b, caches_for(kv) if cold else 1))
    return LinearCost.fit(xs, ys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import torch

    from analyzers.plan.calibrate.attention import _attention, caches_for, measure_decode_attention
    from analyzers.plan.calibrate.grid import CalibrationGrid

    t0 = time.time()
    peak = matmul_peak([(2048, 2048, 2048)])
    grid = CalibrationGrid()
    threads = torch.get_num_threads()
    models = {
        "one price, hot": one_price(grid, cold=False),
        "one price, cold": one_price(grid, cold=True),
    }
    three, _ = measure_decode_attention(grid)
    rng = random.Random(a.seed)
    rows, table = [], []
    for i in range(a.draws):
        d = draw(rng)
        layout = dataclasses.replace(grid, heads=d.heads, kv_heads=d.kv_heads, head_dim=d.head_dim)
        measured = _attention(layout, [(d.context - 1, 1)] * d.batch, caches_for(d.kv_elements))
        predicted = {name: cost.seconds(d.kv_elements) for name, cost in models.items()}
        predicted["three prices"] = three.seconds(d.kv_elements, d.scores * d.head_dim, d.scores, threads)
        errors = {name: p / measured - 1 for name, p in predicted.items()}
        split = three.threads_for(d.kv_elements, threads)
        rows.append(
            dict(
                draw=i, **dataclasses.asdict(d), threads=split, measured_s=measured, predicted_s=predicted, error=errors
            )
        )
        table.append(
            [i, f"{d.heads}/{d.kv_heads}/{d.head_dim}", d.batch, d.context, split, f"{measured * 1e6:,.0f}"]
            + [f"{errors[n]:+.0%}" for n in predicted]
        )
    names = list(rows[0]["error"])
    print_table(
        f"decode attention: {a.draws} drawn shapes (seed {a.seed}), each model's error against the layer's call",
        ["draw", "heads/KV/dim", "batch", "context", "threads", "measured us", *names],
        table,
    )

    def pooled(which: list[dict]) -> dict:
        out = {}
        for n in names:
            errs = sorted(abs(r["error"][n]) for r in which)
            out[n] = (
                {"median": statistics.median(errs), "p90": errs[min(len(errs) - 1, int(0.9 * len(errs)))]}
                if errs
                else {}
            )
        return out

    summary = {
        "all": pooled(rows),
        "one thread": pooled([r for r in rows if r["threads"] == 1]),
        "split": pooled([r for r in rows if r["threads"] > 1]),
    }
    counts = {
        "all": len(rows),
        "one thread": sum(r["threads"] == 1 for r in rows),
        "split": sum(r["threads"] > 1 for r in rows),
    }
    print_table(
        "median / P90 of |error|",
        ["draws", "n", *names],
        [
            [k, counts[k]] + [f"{v[n]['median']:.0%} / {v[n]['p90']:.0%}" if v.get(n) else "-" for n in names]
            for k, v in summary.items()
        ],
    )
    write_json(
        a.out,
        {
            "bench": "decode_attention_model",
            "args": vars(a),
            "machine": machine(),
            "matmul_peak": peak,
            "wall_s": round(time.time() - t0, 1),
            "models": {
                **{n: dataclasses.asdict(c) for n, c in models.items()},
                "three prices": dataclasses.asdict(three),
            },
            "draws": rows,
            "summary": summary,
            "counts": counts,
        },
    )


if __name__ == "__main__":
    main()
