"""Under pipeline parallelism on one CPU host, which schedule decodes faster: the batch queue (vLLM's:
up to PP batches in flight, the stages computing at once) or the stages taking turns (the micro-batch
schedule with one micro-batch: a step's one batch through stage 0, then stage 1)?

refengine's `--pipeline-schedule auto` picks the batch queue under PP on GPUs, as vLLM does, where
each stage has a device and a memory of its own, and on CPU the stages taking turns (this measurement
is why). On a host whose ranks share its cores and memory,
bench/weight_streaming.py measured the batch queue 1.57x slower at 4 users (bench/RESULTS.md). This
measures the `tiny` model at PP2 offline (`LLMEngine`, one thread per rank, a closed loop of 128-token
prompts and 64-token outputs, the measured window after a third of it as warm-up) at each number of
users under both schedules, each engine in a process of its own, one after the other:

    python bench/pipeline_schedule.py --users 1,2,4,8,16 --out bench/pipeline_schedule.json   # ~4 min
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, matmul_peak  # noqa: E402

WEIGHT_STREAMING = ROOT / "bench" / "weight_streaming.py"  # its engine loop (engine_tpot), one process each


def run_engine(users: int, turns: bool, seconds: float) -> dict:
    p = subprocess.run(
        [sys.executable, str(WEIGHT_STREAMING), "--engine", f"2,{users},{int(turns)}", "--seconds", str(seconds)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"the engine at {users} users ({'turns' if turns else 'batch queue'}) failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="1,2,4,8,16", help="closed-loop users, a comma list")
    ap.add_argument("--seconds", type=float, default=12.0, help="measured seconds of each engine loop")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for users in (int(u) for u in a.users.split(",")):
        queue, turns = run_engine(users, False, a.seconds), run_engine(users, True, a.seconds)
        row = {
            "users": users,
            "batch_queue_tpot_ms": queue["tpot_mean_ms"],
            "turns_tpot_ms": turns["tpot_mean_ms"],
            "queue_over_turns": round(queue["tpot_mean_ms"] / turns["tpot_mean_ms"], 2)
            if queue["tpot_mean_ms"] and turns["tpot_mean_ms"]
            else None,
            "batch_queue": queue,
            "turns": turns,
        }
        rows.append(row)
        print(
            f"{users:>3} users: batch queue {row['batch_queue_tpot_ms']} ms a token, turns {row['turns_tpot_ms']} "
            f"({row['queue_over_turns']}x)",
            flush=True,
        )
    out = {
        "command": " ".join(["python", *sys.argv]),
        "host": machine(),
        "matmul_f32_gflops": round(max(matmul_peak([(2048, 1024, 1024)]).values()) / 1e9, 1),
        "rows": rows,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
