"""What a library call may not leave changed in its caller's process: signal handlers (Python's and
the C-level disposition under them), the main thread's signal mask, threads, child processes.

A test captures the state before a public entry point (LLM with TP/PP, the in-process server,
run_level, a ProbeSet) and checks it after: threads and children get a few seconds to finish
exiting (they are asked to stop; the check waits for what was asked, it does not time the call).
Python's own multiprocessing resource tracker is left out: the standard library starts it once per
process on the first spawned child, by design, and keeps it for the process's life.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from dataclasses import dataclass

SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGCHLD,
    signal.SIGPIPE,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
)


class _SigAction(ctypes.Structure):  # glibc's struct sigaction on Linux
    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _disposition(sig: int) -> int | None:
    """The handler the kernel calls (SIG_DFL 0, SIG_IGN 1, or an address): a C extension that
    installs its own handler changes this while Python's getsignal() still reports the old one."""
    old = _SigAction()
    if _libc.sigaction(int(sig), None, ctypes.byref(old)) != 0:
        return None
    return old.handler or 0


def _main_thread_mask() -> str:
    tid = threading.main_thread().native_id
    with open(f"/proc/self/task/{tid}/status") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("SigBlk")), "")


def _children() -> frozenset[int]:
    me = os.getpid()
    out = set()
    for tid in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                out.update(int(p) for p in f.read().split())
        except OSError:
            continue
    return frozenset(p for p in out if not _is_resource_tracker(p))


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


@dataclass(frozen=True)
class ProcessState:
    handlers: tuple  # Python-level handler of each of SIGNALS
    dispositions: tuple  # the kernel's disposition of each
    mask: str  # the main thread's blocked signals
    threads: frozenset  # (ident, name) of live threads
    children: frozenset  # child pids

    @classmethod
    def capture(cls) -> "ProcessState":
        return cls(
            tuple(signal.getsignal(s) for s in SIGNALS),
            tuple(_disposition(s) for s in SIGNALS),
            _main_thread_mask(),
            frozenset((t.ident, t.name) for t in threading.enumerate() if t.is_alive()),
            _children(),
        )

    def changes_since(self, before: "ProcessState") -> list[str]:
        out = []
        for sig, old, new in zip(SIGNALS, before.handlers, self.handlers):
            if old != new:
                out.append(f"{sig.name} handler {old!r} -> {new!r}")
        for sig, old, new in zip(SIGNALS, before.dispositions, self.dispositions):
            if old != new:
                out.append(f"{sig.name} disposition {old} -> {new} (a handler installed under Python's)")
        if self.mask != before.mask:
            out.append(f"main thread's signal mask {before.mask} -> {self.mask}")
        if self.threads - before.threads:
            out.append(f"threads left running: {sorted(n for _, n in self.threads - before.threads)}")
        if self.children - before.children:
            out.append(f"child processes left: {sorted(self.children - before.children)}")
        return out


def assert_unchanged(before: ProcessState, settle_s: float = 15.0) -> None:
    """The process is as `before` was, allowing settle_s for stopped threads and children to exit."""
    until = time.monotonic() + settle_s
    while True:
        changes = ProcessState.capture().changes_since(before)
        if not changes or time.monotonic() > until:
            break
        time.sleep(0.1)
    assert not changes, "the call left its caller's process changed: " + "; ".join(changes)
