"""The bundled target: `python -m refengine.server` on a free loopback port for a sweep's duration.

It runs in its own process: the load generator's process is monkey-patched by gevent and must
not also run model compute (docs/architecture.md, host facts).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from rundir.ports import free_port


class EmbeddedServer:
    def __init__(
        self,
        model: str = "tiny",
        engine_args: list[str] | None = None,
        startup_timeout_s: float = 300.0,
        threads: int | None = None,
        data_parallel_size: int = 1,
        lb_policy: str | None = None,
    ):
        if data_parallel_size < 1:
            raise ValueError(f"data_parallel_size must be at least 1, got {data_parallel_size}")
        if lb_policy is not None and data_parallel_size < 2:
            raise ValueError(f"an lb policy ({lb_policy}) balances a fleet: data_parallel_size is {data_parallel_size}")
        self.model = model
        self.data_parallel_size = data_parallel_size  # > 1: replicas behind the engine's own front
        self.lb_policy = lb_policy  # the front's (None: its default)
        self.threads = threads  # torch intra-op threads of the server (None: torch's default, one per core)
        self.engine_args = list(engine_args or [])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile("w+", prefix="llmbench-server-", suffix=".log", delete=False)

    @property
    def command(self) -> list[str]:
        fleet = ["--data-parallel-size", str(self.data_parallel_size)] if self.data_parallel_size > 1 else []
        fleet += ["--lb-policy", self.lb_policy] if self.lb_policy is not None else []
        return [
            sys.executable,
            "-m",
            "refengine.server",
            "--model",
            self.model,
            "--port",
            str(self.port),
            *fleet,
            *self.engine_args,
        ]

    def start(self) -> "EmbeddedServer":
        env = os.environ.copy()
        if self.threads is not None:
            if self.threads < 1:
                raise ValueError(f"server threads must be at least 1, got {self.threads}")
            env["OMP_NUM_THREADS"] = str(self.threads)  # torch sizes its intra-op pool from it
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the embedded server exited with {self.proc.returncode}:\n{self.tail()}")
            if self.healthy():
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the embedded server did not become healthy in {self.startup_timeout_s:.0f} s")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 20) -> str:
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
