"""Real servers on free loopback ports: one subprocess (`python -m refengine.server`) and one
in-process uvicorn (so a test can look inside the engine, e.g. run the KV integrity check)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from process_state import ProcessState, assert_unchanged

MODEL = "tiny-test"


from refengine_proc import free_port, start_refengine, wait_healthy  # noqa: E402  (shared with other test folders)


def _start_server_process(*extra: str) -> tuple[subprocess.Popen, str]:
    return start_refengine("--max-model-len", "256", *extra, model=MODEL)


# The hardened server of the robustness tests and the fuzz (one process for both): short header
# and body deadlines so the timeout tests are quick, a 16 MiB body limit so the 413 test is.
ROBUST_TIMEOUT_S = 2
ROBUST_BODY_LIMIT = 16 * 1024 * 1024


@pytest.fixture(scope="session")
def robust_server():
    """(url, header/body deadline in s, body limit in bytes) of a server all robustness tests share."""
    proc, url = start_refengine(
        "--max-model-len",
        "256",
        "--max-request-body-bytes",
        str(ROBUST_BODY_LIMIT),
        "--timeout-request-header",
        str(ROBUST_TIMEOUT_S),
        "--timeout-request-body",
        str(ROBUST_TIMEOUT_S),
        "--timeout-keep-alive",
        "1",
        quiet=True,
    )
    yield url, ROBUST_TIMEOUT_S, ROBUST_BODY_LIMIT
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def server_url():
    proc, url = _start_server_process("--api-key", "sekret", "--served-model-name", "tiny-test")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


class _InProcessServer:
    def __init__(self, max_waiting: int = 1024, **engine_kwargs):
        import uvicorn

        from refengine.config import EngineArgs
        from refengine.engine import LLMEngine
        from refengine.server.app import Server

        self.engine = LLMEngine(EngineArgs(model=MODEL, max_model_len=256, **engine_kwargs))
        self.server = Server(self.engine, MODEL, max_waiting_requests=max_waiting)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.uvicorn = uvicorn.Server(
            uvicorn.Config(self.server.app(), host="127.0.0.1", port=port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def __enter__(self):
        self.state_before = ProcessState.capture()
        self.thread.start()
        wait_healthy(self.url)
        return self

    def wait_idle(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server.loop.stats
            if s.num_running == 0 and s.num_waiting == 0 and not self.engine.has_unfinished_requests():
                return
            time.sleep(0.05)
        raise TimeoutError("engine did not go idle")

    def __exit__(self, exc_type, *exc):
        self.uvicorn.should_exit = True
        self.thread.join(30)
        if exc_type is None:  # served in-process and stopped: the caller's process is as it was
            assert_unchanged(self.state_before)


@pytest.fixture
def InProcessServer():
    return _InProcessServer


@pytest.fixture
def start_server_process():
    return _start_server_process
