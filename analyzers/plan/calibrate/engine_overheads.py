"""What refengine's own code costs beyond the operator tables: per step, and per decoder layer.

The tables price the arithmetic (matmuls, attention, elementwise ops measured alone). A real step
also runs each layer's Python: module calls, the q/k/v split, the attention metadata's handling, the
residual glue, each op's dispatch. That cost is paid per layer, not per step, so a per-step constant
fitted on the 2-layer `tiny-test` under-prices it on a model of many layers. On a 2-core AMX Xeon it
came to 48 us + 1.6 us per request a layer (0.4 ms a step of the 8-layer `tiny`): real, but a small
part of what the step model still misses on `tiny`'s decode steps (bench/RESULTS.md, "The step model
against the engine's own offline steps").

Both are measured on the real LLMEngine decoding checkpoints of `tiny-test`'s shape (whose
arithmetic is negligible), written here at two depths:

- layer overhead: (step at DEEP layers - step at SHALLOW layers) / (DEEP - SHALLOW), less what the
  tables already price for those layers, at a few batch sizes, fitted to requests;
- step overhead: the SHALLOW model's step less everything the step model prices for it (its layers
  with their overhead included), fitted to requests (scheduler, input tensors, sampler, outputs).

Each point is the least disturbed step (the fastest), as every other calibration point; the two
depths step in turn, so that the machine's drift falls on both.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from analyzers.plan.profile import LinearCost

OVERHEAD_MODEL = "tiny-test"
SHALLOW, DEEP = 2, 8  # the two depths of OVERHEAD_MODEL's shape that are measured
PROMPT_LEN, STEPS = 32, 24

# price(model_dir, batch, context, layer_overhead): the step model's price of one decode step of
# `batch` requests at `context` tokens on the checkpoint in model_dir, from the tables measured so far,
# with that layer overhead (None: none) and no step overhead.
Price = Callable[[str, int, int, "LinearCost | None"], float]


@dataclasses.dataclass(frozen=True)
class EngineOverheads:
    step: LinearCost  # per step, by requests
    layer: LinearCost  # per decoder layer, by requests
    points: dict  # what was measured, for the profile's record


def write_depths(root: Path) -> dict[int, str]:
    """OVERHEAD_MODEL's checkpoint at SHALLOW and DEEP layers, under root."""
    from refengine.model.tiny import PRESETS, write_checkpoint

    out = {}
    for layers in (SHALLOW, DEEP):
        path = root / f"{OVERHEAD_MODEL}-{layers}-layers"
        path.mkdir()
        write_checkpoint(dataclasses.replace(PRESETS[OVERHEAD_MODEL], num_layers=layers), path)
        out[layers] = str(path)
    return out


def decode_steps_s(
    model_dirs: dict[int, str], batches: tuple[int, ...], device: str = "cpu"
) -> dict[int, dict[int, float]]:
    """The fastest decode step of the real engine on each checkpoint at each batch size
    (PROMPT_LEN-token prompts). The engines step in turn, one step each, so that whatever else the
    machine does falls on all of them alike: their difference is what the layer overhead stands on."""
    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine
    from refengine.sampling_params import SamplingParams

    engines = {
        key: LLMEngine(EngineArgs(model=path, max_model_len=1024, enable_prefix_caching=False, device=device))
        for key, path in model_dirs.items()
    }
    out: dict[int, dict[int, float]] = {key: {} for key in engines}
    for b in batches:
        times: dict[int, list[float]] = {key: [] for key in engines}
        for engine in engines.values():
            for i in range(b):
                engine.add_request(
                    [17 + (i * 7 + j) % 1000 for j in range(PROMPT_LEN)],
                    SamplingParams(max_tokens=STEPS + 1, ignore_eos=True),
                )
            engine.step()  # the prefill
        for _ in range(STEPS):
            for key, engine in engines.items():
                t0 = time.perf_counter()
                engine.step()
                times[key].append(time.perf_counter() - t0)
        for key, engine in engines.items():
            while engine.has_unfinished_requests():
                engine.step()
            out[key][b] = min(times[key][2:])
    return out


def measure_engine_overheads(batches: tuple[int, ...], price: Price, device: str = "cpu") -> EngineOverheads:
    context = PROMPT_LEN + STEPS // 2
    with tempfile.TemporaryDirectory(prefix="llmbench-calibrate-") as tmp:
        models = write_depths(Path(tmp))
        steps = decode_steps_s(models, batches, device)
        span = DEEP - SHALLOW
        layer_points = []
        for b in batches:
            measured = (steps[DEEP][b] - steps[SHALLOW][b]) / span
            priced = (price(models[DEEP], b, context, None) - price(models[SHALLOW], b, context, None)) / span
            layer_points.append((float(b), max(1e-7, measured - priced)))  # a floor: fits are relative
        layer = LinearCost.fit(*map(list, zip(*layer_points)))
        step_points = [
            (float(b), max(1e-6, steps[SHALLOW][b] - price(models[SHALLOW], b, context, layer))) for b in batches
        ]
    step = LinearCost.fit(*map(list, zip(*step_points)))
    return EngineOverheads(step, layer, {"layer_overhead": layer_points, "step_overhead": step_points})
