"""One engine step of a lone prefill: refengine's LLMEngine measured, beside the step model's price
with the profile's prefill attention table and with the line it replaced (docs/planning.md).

    python bench/prefill_step.py --profile bench/plan_profile_runs3_attention_table.json \
        --models tiny-test,/work/pa/runs3/random-llama-512x4 [--out bench/prefill_step.json]

Each figure is the fastest of five steps (other processes only ever add time); the offline engine,
one process, the machine's threads: the model's own operators, not the served engine's.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, print_table, write_json  # noqa: E402


def measure(model: str, tokens: tuple[int, ...], profile_path: str) -> list[dict]:
    from analyzers.model.presets import resolve_model
    from analyzers.plan.profile import MachineProfile
    from analyzers.plan.step_model import StepModel, StepShape
    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine
    from refengine.sampling_params import SamplingParams

    profile = MachineProfile.load(profile_path)
    table_model = StepModel(resolve_model(model), profile)
    line_model = StepModel(resolve_model(model), dataclasses.replace(profile, attention_prefill_table=None))
    engine = LLMEngine(
        EngineArgs(model=model, max_model_len=4096, enable_prefix_caching=False, max_num_batched_tokens=4096)
    )
    rows = []
    for n in tokens:
        times = []
        for rep in range(5):
            engine.add_request([17 + (rep * 31 + j * 7) % 1000 for j in range(n)], SamplingParams(max_tokens=1))
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
            while engine.has_unfinished_requests():
                engine.step()
        step = StepShape(((n, n),), 1)
        rows.append(
            {
                "model": model,
                "tokens": n,
                "measured_s": min(times),
                "table_s": table_model.step_cost(step).total_s,
                "line_s": line_model.step_cost(step).total_s,
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, help="a profile with an attention_prefill_table")
    p.add_argument("--models", default="tiny-test", help="comma-separated models (presets or checkpoint folders)")
    p.add_argument("--tokens", default="128,512,2048")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    tokens = tuple(int(x) for x in a.tokens.split(","))
    rows = [r for m in a.models.split(",") for r in measure(m, tokens, a.profile)]
    print_table(
        "one prefill step: measured vs priced (ms)",
        ["model", "tokens", "measured", "table", "line"],
        [
            [Path(r["model"]).name, r["tokens"], *(f"{r[k] * 1e3:.2f}" for k in ("measured_s", "table_s", "line_s"))]
            for r in rows
        ],
    )
    write_json(a.out, {"bench": "prefill_step", "args": vars(a), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
