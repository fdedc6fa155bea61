"""Where one decode step's time goes, by part: the engine's real step, profiled (issue 26).

One LLMEngine per run (default: `tiny` in bfloat16), `batch` sequences of `--prompt` tokens, all past
their prefill; then `--steps` decode steps under torch.profiler. Every part the engine calls is
labelled at its call site (the layers look their kernels up as module attributes at each call, so
wrapping those attributes labels the real calls): the linears (refengine/model/layers/cpu_gemm.py,
the LM head included), the C++ decode attention and layer ops (kernels/), the attention layer as a
whole, the sampler and the runner's input preparation. What no label covers is "the rest": the
Python of the layers and the step (scheduler, outputs), and the PyTorch ops between the labels.

Each part is its time inside its label summed over the steps (a label inside another is counted in
both: the attention layer includes its decode kernel), divided by the steps; "the rest" is the
wall-clock step less the labelled top-level parts. Run it pinned as a server runs (`taskset -c 0`:
one core, torch on one thread) to compare with bench/vs_vllm.py's servers.

    taskset -c 0 python bench/step_profile.py --batches 1,16 --out bench/step_profile.json

--closed-loop N profiles the steps a served closed loop makes instead (prefills mixed with decodes):
N users, each sending its next `--prompt`-token request as its last one finishes (after `--output`
tokens), for `--seconds` after a third as long to settle; each part's time per step as above, and
the users' own rate (N x output tokens / mean time a request took, Little's law) beside.

    taskset -c 0 python bench/step_profile.py --dtype float32 --closed-loop 64 --prompt 256 --seconds 90
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, matmul_peak
from refengine.config import EngineArgs
from refengine.engine import LLMEngine
from refengine.kernels import cpu_layer_ops, cpu_paged_decode
from refengine.model.layers import attention, cpu_gemm
from refengine.runner import model_runner, sampler
from refengine.sampling_params import SamplingParams

# (label, module, attribute, top level): top-level parts do not nest in one another, so their sum
# is what the labels cover of the step.
PARTS = (
    ("linears", cpu_gemm, "linear", True),
    ("attention layer", attention.Attention, "forward", True),
    ("decode attention kernel", cpu_paged_decode, "paged_decode_cpu", False),
    ("add + RMSNorm", cpu_layer_ops, "add_rms_norm", True),
    ("RoPE", cpu_layer_ops, "rope", True),
    ("SiLU x up", cpu_layer_ops, "silu_and_mul", True),
    ("sampler", sampler.Sampler, "__call__", True),
    ("input preparation", model_runner.ModelRunner, "_prepare", True),
)


_IDS = itertools.count()


def _labelled(label: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with record_function(label):
            return fn(*args, **kwargs)

    return wrapper


def label_parts() -> None:
    for label, owner, name, _ in PARTS:
        setattr(owner, name, _labelled(label, getattr(owner, name)))


def profile_batch(engine: LLMEngine, batch: int, prompt: int, steps: int) -> dict:
    params = SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=0.0)
    for i in range(batch):
        request_id = f"b{batch}-{i}-{next(_IDS)}"  # unique across calls on one engine
        engine.add_request([(7 * i + t) % 500 + 10 for t in range(prompt)], params, request_id=request_id)
    while engine.scheduler.num_waiting or any(r.num_computed_tokens < prompt for r in engine.scheduler.running):
        engine.step()
    for _ in range(3):  # warm: every part has run at this batch
        engine.step()
    walls = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            engine.step()
            walls.append(time.perf_counter() - t0)
    while engine.has_unfinished_requests():
        engine.step()
    return {"batch": batch, **step_parts(prof, walls), "step_ms_median": round(1e3 * statistics.median(walls), 3)}


def step_parts(prof, walls: list[float]) -> dict:
    """Each part's time inside its label per step, the mean step, and what no top-level label covers."""
    totals = {e.key: e.cpu_time_total / 1e3 / len(walls) for e in prof.key_averages() if e.key in _labels()}
    parts = {label: round(totals.get(label, 0.0), 3) for label, *_ in PARTS}
    mean_ms = 1e3 * statistics.mean(walls)
    covered = sum(parts[label] for label, _, _, top in PARTS if top)
    return {"step_ms_mean": round(mean_ms, 3), "parts_ms": parts, "rest_ms": round(mean_ms - covered, 3)}


def profile_closed_loop(engine: LLMEngine, users: int, prompt: int, output: int, seconds: float) -> dict:
    """Steps as a closed loop of `users` makes them: each finished request is replaced by a new one."""
    params = SamplingParams(max_tokens=output, ignore_eos=True, temperature=0.0)
    sent: dict[str, float] = {}
    took: list[float] = []

    def send() -> None:
        i = next(_IDS)
        engine.add_request([(7 * i + 13 * t) % 500 + 10 for t in range(prompt)], params, request_id=f"u{i}")
        sent[f"u{i}"] = time.perf_counter()

    def run(duration: float, walls: list[float] | None) -> None:
        t_end = time.perf_counter() + duration
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            outputs = engine.step()
            if walls is not None:
                walls.append(time.perf_counter() - t0)
            for out in outputs:
                if out.finished:
                    start = sent.pop(out.request_id)
                    if walls is not None and start >= t_window:  # sent and finished inside the window
                        took.append(time.perf_counter() - start)
                    send()

    for _ in range(users):
        send()
    run(seconds / 3, None)
    walls: list[float] = []
    t_window = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(seconds, walls)
    for request_id in list(sent):  # the loop's last requests, not waited for
        engine.abort_request(request_id)
    while engine.has_unfinished_requests():
        engine.step()
    return {
        "users": users,
        "steps": len(walls),
        "requests_timed": len(took),
        "users_own_tok_s": round(users * output / statistics.mean(took), 2) if took else None,
        **step_parts(prof, walls),
    }


def _labels() -> set[str]:
    return {label for label, *_ in PARTS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="a preset or a Hugging Face model directory")
    ap.add_argument("--dtype", default="bfloat16", help="the engine's --dtype")
    ap.add_argument("--batches", default="1,16", help="sequences decoding at once, a comma list")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens of each sequence")
    ap.add_argument("--steps", type=int, default=30, help="decode steps profiled per batch")
    ap.add_argument("--closed-loop", type=int, default=0, help="users of a closed loop to profile instead (see above)")
    ap.add_argument("--output", type=int, default=32, help="--closed-loop: output tokens of each request")
    ap.add_argument("--seconds", type=float, default=60.0, help="--closed-loop: seconds profiled")
    ap.add_argument("--out", default=None, help="write the figures here as JSON")
    a = ap.parse_args()
    label_parts()
    engine = LLMEngine(EngineArgs(model=a.model, dtype=a.dtype, max_model_len=1024, enable_prefix_caching=False))
    if a.closed_loop:
        rows = [profile_closed_loop(engine, a.closed_loop, a.prompt, a.output, a.seconds)]
    else:
        rows = [profile_batch(engine, int(b), a.prompt, a.steps) for b in a.batches.split(",")]
    result = {
        "command": " ".join(sys.argv),
        "host": machine(),
        "matmul_peak": matmul_peak([(2048, 1024, 1024)]),
        "torch_threads": torch.get_num_threads(),
        "model": a.model,
        "dtype": a.dtype,
        "prompt": a.prompt,
        "rows": rows,
    }
    for r in rows:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r["parts_ms"].items())
        what = f"closed loop of {r['users']} ({r['users_own_tok_s']} tok/s)" if "users" in r else f"batch {r['batch']}"
        print(f"{what}: step {r['step_ms_mean']:.2f} ms = {parts}; rest {r['rest_ms']:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
