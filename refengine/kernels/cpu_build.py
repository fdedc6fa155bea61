"""CppLibrary: a small C++ source compiled once with the system compiler, cached, loaded through ctypes.

The CPU kernels (cpu_paged_decode.py, cpu_layer_ops.py) are plain C++ with no torch headers, built
on first use with g++ in a few seconds and cached under $LLMBENCH_CACHE/kernels (default
~/.cache/llmbench/kernels); ctypes releases the GIL for each call. They are built with
-march=native, so the cache is keyed by the CPU's instruction-set flags as well as the source,
compiler flags and machine: a home directory shared with a CPU that lacks AVX-512 must not load an
object that uses it (that dies with SIGILL, which no fallback catches). What each object was built
for is written beside it (the .txt of the same name). Built into a temporary file and renamed into
place, so concurrent processes never load a half-written library. Where it cannot be built,
`available()` is False with the reason logged once, and the caller's PyTorch path runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def enabled_by_env() -> bool:
    """The CPU kernels' switch: `REFENGINE_CPU_KERNELS=0` turns every one of them off."""
    return os.environ.get("REFENGINE_CPU_KERNELS", "1") != "0"


FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-std=c++17", "-shared", "-fPIC", "-pthread"]


def cache_dir() -> Path:
    root = os.environ.get("LLMBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmbench")
    return Path(root) / "kernels"


def cpu_flags() -> list[str]:
    """This CPU's instruction-set flags: what -march=native compiles for.

    The `flags` line of /proc/cpuinfo on x86 Linux (`Features` on ARM); elsewhere only
    platform.processor(), which is coarser but still tells CPU families apart."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return value.split()
    except OSError:
        pass
    return [platform.processor()]


class CppLibrary:
    """`name`: the object's file stem and the log's words; `declare` sets the ctypes signatures."""

    def __init__(self, name: str, source: str, declare: Callable[[ctypes.CDLL], None], what: str):
        self.name, self.source, self.declare, self.what = name, source, declare, what
        self._loaded: ctypes.CDLL | None = None
        self._available: bool | None = None

    def key(self) -> str:
        """Everything the built object depends on, readable: its hash names the file, and it is written beside it."""
        return (
            f"source sha256: {hashlib.sha256(self.source.encode()).hexdigest()}\n"
            f"compiler flags: {' '.join(FLAGS)}\n"
            f"machine: {platform.machine()}\n"
            f"cpu flags: {' '.join(sorted(set(cpu_flags())))}\n"
        )

    def path(self) -> Path:
        return cache_dir() / f"{self.name}-{hashlib.sha256(self.key().encode()).hexdigest()[:16]}.so"

    def load(self) -> ctypes.CDLL:
        """Compile once per source, flags, machine and CPU (a few seconds), then load the cached .so."""
        if self._loaded is not None:
            return self._loaded
        lib = self.path()
        if not lib.exists():
            cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
            if cxx is None:
                raise RuntimeError("no C++ compiler (g++ / c++) on PATH")
            lib.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
                src, out = Path(tmp) / "k.cpp", Path(tmp) / "k.so"
                src.write_text(self.source)
                subprocess.run([cxx, *FLAGS, str(src), "-o", str(out)], check=True, capture_output=True, timeout=120)
                (Path(tmp) / "k.txt").write_text(self.key())
                os.replace(Path(tmp) / "k.txt", lib.with_suffix(".txt"))  # first: every cached .so has its note
                os.replace(out, lib)
        cdll = ctypes.CDLL(str(lib))
        self.declare(cdll)
        self._loaded = cdll
        return cdll

    def available(self) -> bool:
        """Whether the library is built (building it on the first call); False where it cannot be."""
        if self._available is None:
            try:
                self.load()
                self._available = True
            # No compiler (RuntimeError, or OSError for a $CXX that is not there), a failed or hung build
            # (SubprocessError), a cache or library that cannot be written or loaded (OSError), a library
            # without the symbol (AttributeError): the PyTorch path runs.
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                log.warning(
                    "%s unavailable (%s: %s %s); using the PyTorch path",
                    self.what,
                    type(exc).__name__,
                    exc,
                    detail.decode(errors="replace")[:200],
                )
                self._available = False
        return self._available

    def forget(self) -> None:
        """Judge and load again on the next call (tests that change the compiler or the cache)."""
        self._loaded, self._available = None, None
