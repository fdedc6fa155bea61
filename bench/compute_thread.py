"""Which thread steps the engine, and what it costs: three arrangements side by side, each in a fresh process.

- `main`: built and stepped on the main thread (the offline `LLM` API);
- `built on main, stepped on a thread`: how the server ran before refengine/server/compute_thread.py:
  the engine built on the main thread (whose first parallel ops start an OpenMP team there), its
  steps on another thread (a second team on the same cores);
- `one compute thread`: built and stepped on one ComputeThread, as the server runs it now.

Each arm measures the median engine step of a prefill of one prompt at each length and of decode
batches (bench/step_model_vs_engine.py's measurements), in its own process so that no arm inherits
another's OpenMP teams; the arms run in turn, `--reps` times in alternating order, and the median of
each arm's medians counts.

    python bench/compute_thread.py [--model random] [--prompts 128,512] [--batches 1,4,16] [--reps 2] [--out JSON]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, print_table, write_json  # noqa: E402

ARMS = ("main", "built on main, stepped on a thread", "one compute thread")


def measure(arm: str, model: str, prompts: list[int], batches: list[int]) -> dict:
    """One arm in this process: {"prefill": {n: s}, "decode": {b: s}}."""
    from bench.step_model_vs_engine import _engine, measure_decodes, measure_prefills
    from refengine.server.compute_thread import ComputeThread

    def steps(engine) -> dict:
        return {"prefill": measure_prefills(engine, prompts), "decode": measure_decodes(engine, batches, 128)}

    if arm == "main":
        return steps(_engine(model))
    if arm == "built on main, stepped on a thread":
        engine, out = _engine(model), {}
        t = threading.Thread(target=lambda: out.update(steps(engine)))
        t.start()
        t.join()
        return out
    compute = ComputeThread()
    engine = compute.call(lambda: _engine(model))
    return compute.call(lambda: steps(engine))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="random", help="a built-in model, or 'random' (bench/plan_accuracy.py's)")
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # the child process's arm
    a = ap.parse_args()
    prompts = [int(x) for x in a.prompts.split(",")]
    batches = [int(x) for x in a.batches.split(",")]
    if a.arm is not None:
        print(json.dumps(measure(a.arm, a.model, prompts, batches)))
        return
    from bench.plan_accuracy import _model_path

    model = _model_path(a.model, Path(tempfile.mkdtemp(prefix="compute_thread_")))
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for rep in range(a.reps):
        for arm in ARMS if rep % 2 == 0 else tuple(reversed(ARMS)):
            cmd = [sys.executable, __file__, "--arm", arm, "--model", str(model), "--prompts", a.prompts]
            out = subprocess.run([*cmd, "--batches", a.batches], capture_output=True, text=True, check=True, cwd=ROOT)
            runs[arm].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(arm: str, kind: str, key: int) -> float:
        return statistics.median(r[kind][str(key)] for r in runs[arm]) * 1e3

    rows = [("prefill", n) for n in prompts] + [("decode", b) for b in batches]
    print_table(
        f"{a.model}: median engine step ms by the thread that steps it ({a.reps} processes per arm, alternating)",
        ["step", *ARMS],
        [[f"{kind} {size}", *(f"{med(arm, kind, size):.2f}" for arm in ARMS)] for kind, size in rows],
    )
    write_json(
        a.out,
        {
            "bench": "compute_thread",
            "args": {k: v for k, v in vars(a).items() if k != "arm"},
            "machine": machine(),
            "median_ms": {arm: {f"{k} {s}": med(arm, k, s) for k, s in rows} for arm in ARMS},
            "runs_s": runs,
        },
    )


if __name__ == "__main__":
    main()
