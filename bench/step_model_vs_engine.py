"""How well does the calibrated step model price one engine step, before any server or fit is involved?

The planner's predictions stand on the step model (analyzers/plan/step_model.py): operators priced
from `llmdiag calibrate`'s tables plus the engine's measured per-step overhead. This bench holds it
against refengine's own offline engine (LLMEngine, no HTTP server, no load generator, prefix caching
off) step by step: a prefill of one prompt at several lengths, and decode steps at several batch
sizes, each the median of repeated timed steps, beside the step model's price of the same step. What
it measures is the calibration's own error; what a served run adds on top (the HTTP server, the
client on the same cores) is the fit's business (bench/plan_accuracy.py).

    python bench/step_model_vs_engine.py --profile FILE [--models tiny-test,tiny,random]
                                         [--prompts 32,128,512,1024] [--batches 1,4,16]
                                         [--decode-contexts 128,512] [--out JSON]

Without --profile it calibrates first (`llmdiag calibrate --no-comm --ranks 1`, about 10 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, print_table, write_json  # noqa: E402
from bench.plan_accuracy import _model_path  # noqa: E402

DECODE_STEPS = 20
PREFILL_REPEATS = 7


def _engine(model: str):
    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine

    return LLMEngine(EngineArgs(model=model, max_model_len=4096, enable_prefix_caching=False))


def _prompt(seed: int, n: int) -> list[int]:
    return [17 + (seed * 977 + j * 7) % 4000 for j in range(n)]


def measure_prefills(engine, prompts: list[int]) -> dict[int, float]:
    """Median seconds of one step that prefills one prompt of each length (a warm-up step first)."""
    from refengine.sampling_params import SamplingParams

    out = {}
    for n in prompts:
        times = []
        for rep in range(PREFILL_REPEATS + 1):
            engine.add_request(_prompt(rep + n, n), SamplingParams(max_tokens=1, ignore_eos=True))
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
            while engine.has_unfinished_requests():
                engine.step()
        out[n] = statistics.median(times[1:])
    return out


def measure_decodes(engine, batches: list[int], context: int) -> dict[int, float]:
    """Median seconds of a decode step of b requests at about `context` + 10 tokens of context."""
    from refengine.sampling_params import SamplingParams

    out = {}
    for b in batches:
        for i in range(b):
            engine.add_request(_prompt(i, context), SamplingParams(max_tokens=DECODE_STEPS + 2, ignore_eos=True))
        while engine.scheduler.waiting:  # every prefill done
            engine.step()
        times = []
        for _ in range(DECODE_STEPS):
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
        while engine.has_unfinished_requests():
            engine.step()
        out[b] = statistics.median(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=None, help="a machine profile (llmdiag calibrate); calibrated here if absent")
    ap.add_argument("--models", default="tiny-test,tiny,random")
    ap.add_argument("--prompts", default="32,128,512,1024")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--decode-contexts", default="128", help="the prompt each decoding request had")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from analyzers.model.presets import resolve_model
    from analyzers.plan.profile import MachineProfile
    from analyzers.plan.step_model import StepModel, StepShape

    work = Path(tempfile.mkdtemp(prefix="step_model_vs_engine_"))
    profile_path = a.profile or str(work / "profile.json")
    if a.profile is None:
        cmd = ["llmbench.diag_cli", "calibrate", "--out", profile_path, "--no-comm", "--ranks", "1"]
        subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, check=True)
    profile = MachineProfile.load(profile_path)
    prompts = [int(x) for x in a.prompts.split(",")]
    batches = [int(x) for x in a.batches.split(",")]
    rows, table = [], []
    for name in a.models.split(","):
        path = _model_path(name, work)
        model = StepModel(resolve_model(path), profile)
        engine = _engine(path)
        measured = [("prefill", n, s, StepShape(((n, n),), 1)) for n, s in measure_prefills(engine, prompts).items()]
        for context in (int(x) for x in a.decode_contexts.split(",")):
            ctx = context + DECODE_STEPS // 2
            measured += [
                (f"decode at {context}", b, s, StepShape(((1, ctx),) * b, b))
                for b, s in measure_decodes(engine, batches, context).items()
            ]
        engine.shutdown()
        for kind, size, seconds, shape in measured:
            cost = model.step_cost(shape)
            err = cost.total_s / seconds - 1
            rows.append(
                dict(
                    model=name,
                    kind=kind,
                    size=size,
                    measured_s=seconds,
                    predicted_s=cost.total_s,
                    error=err,
                    parts_s=cost.parts,
                    notes=sorted(cost.notes),
                )
            )
            table.append([name, kind, size, f"{seconds * 1e3:.2f}", f"{cost.total_s * 1e3:.2f}", f"{err:+.0%}"])
    print_table(
        "the step model against refengine's own offline steps (prefill: prompt tokens; decode: batch)",
        ["model", "step", "size", "measured ms", "predicted ms", "error"],
        table,
    )
    write_json(
        a.out,
        {
            "bench": "step_model_vs_engine",
            "args": vars(a),
            "machine": machine(),
            "profile": {"path": profile_path, "assumptions": profile.assumptions},
            "steps": rows,
        },
    )


if __name__ == "__main__":
    main()
