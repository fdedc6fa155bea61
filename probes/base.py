"""The probe contract: a sampler that appends `{"t": epoch_s, ...}` rows to probes/<name>.jsonl.

A probe is small: `check()` raises ProbeUnavailable once if it cannot run here (no driver, no
permission, not Linux), `sample()` returns one row's fields (or None when it has nothing yet,
e.g. the first reading of a counter that is reported as deltas), `close()` releases what it
holds. Threads, timing and files are the runner's business (probes/runner.py), so each probe
stays a plain object that a test can drive one sample at a time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ProbeUnavailable(Exception):
    """This probe cannot run on this machine; the message says why, in one line."""


class ProbeInputError(ValueError):
    """Input a user handed us (a pcap, a /metrics page, a file) that we cannot read; one-line message."""


@dataclass
class ProbeContext:
    """What probes may need to know about the run they observe."""

    out_dir: Path  # the run directory; rows go to out_dir/probes/<name>.jsonl
    target_url: str | None = None  # base URL of the server (server, tcp, capture probes)
    # A fleet's own /metrics pages, one per replica in replica order: the server probe reads these
    # instead of the target's one page (llmbench sweep --replica-metrics). Empty: target_url's.
    replica_metrics: list[str] = field(default_factory=list)
    server_pid: int | None = None  # the server process when it is local (host, stacks probes)
    # The other replicas' server processes, when a fleet's replicas are driven directly and are local
    # (llmbench sweep --target URL1,URL2), by replica name (its index in the URLs; server_pid is "0"'s):
    # their CPU is the server's, not another process's, and each one's own CPU wait is read apart.
    replica_pids: dict[str, int] = field(default_factory=dict)
    # The load generator's processes (host probe's client_cpu_cores); None = this process and its
    # descendants other than the server's tree (the sweep and its locust children).
    client_pids: list[int] | None = None
    interval_s: float = 1.0  # sampling interval of every probe unless it overrides it
    capture_port: int | None = None  # TCP port the capture probe keeps (default: the target's)
    capture_iface: str | None = None  # interface to sniff (default: lo for a loopback target)
    capture_max_packets: int = 20000  # the capture stops at whichever limit comes first
    capture_max_s: float | None = 600.0  # None: no duration limit of its own (it ends with the probe)
    stacks_record: bool = False  # also run `py-spy record` into a speedscope file


class Probe:
    name: str = "probe"
    # Seconds between samples, or None to use the context's interval (stacks dumps are slower).
    default_interval_s: float | None = None
    # Set by the runner before the last sample at stop: whatever ends then ends with the probe,
    # not on a limit of its own (the capture's duration limit).
    stopping: bool = False

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx

    @property
    def interval_s(self) -> float:
        return self.default_interval_s if self.default_interval_s is not None else self.ctx.interval_s

    def check(self) -> None:
        """Raise ProbeUnavailable if this probe cannot run here. Called once, before any sample."""

    def sample(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def close(self) -> dict[str, Any] | None:
        """Stop and release; may return one last row (e.g. the capture's totals)."""
        return None

    def failure(self) -> str | None:
        """Why this probe measured nothing although it wrote rows (e.g. every scrape of a /metrics
        page failed), or None. The runner records it in run.json's probes as "failed: ..."."""
        return None

    def shortfall(self) -> str | None:
        """What this probe was asked to measure and could not although it measured the rest (a
        fleet's replica whose page was never read), or None. The runner records it in run.json's
        probes as "partial: ..."."""
        return None


class JsonlAppender:
    """probes/<name>.jsonl, one row per line, flushed per row so a crash loses at most one sample."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = open(path, "a", encoding="utf-8")

    def append(self, row: dict) -> None:
        self._f.write(json.dumps(row, separators=(",", ":"), default=_json_default) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_rows(path: Path) -> list[dict]:
    """Rows of a probe file, skipping a torn last line (the run may still be going)."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_text(path: str | os.PathLike) -> str:
    """A /proc or /sys file as text; OSError (missing, no permission) propagates for the caller to word."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
