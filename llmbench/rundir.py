"""The run directory: the one contract between load generator, probes, analyzers and reports.

    runs/<run-id>/
      run.json          RunInfo: what ran, against what, with which spec, and its status
      requests.jsonl    one RequestRecord per line, appended and flushed as each request ends
      probes/<p>.jsonl  time series {"t": epoch_s, ...}
      summary.json      per-level statistics computed by the analyzers
      report.html       the shareable report

Writers append and flush, so a crash or Ctrl-C loses at most the request in flight. Readers
take only what they need and tolerate a torn last line (the run may still be going).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 1
RUN_STATUSES = ("running", "complete", "interrupted")
REQUEST_STATUSES = ("ok", "error", "timeout", "cancelled")
# Error classes of the load generator's taxonomy (RequestRecord.error_kind).
ERROR_KINDS = ("connect", "http_status", "stream_broken", "timeout", "bad_payload")


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are Unix epoch seconds (time.time())."""

    level_id: str
    concurrency: int | None
    request_rate: float | None
    target_input_len: int
    target_output_len: int
    t_scheduled: float                 # when the plan wanted it sent
    t_sent: float                      # when the request left the client
    t_first_token: float | None        # first chunk that carries a generated token
    t_done: float | None               # stream ended (or failed)
    status: str                        # ok | error | timeout | cancelled
    in_window: bool                    # sent inside the level's measured window
    prompt_tokens: int | None = None           # server usage
    completion_tokens: int | None = None       # server usage
    client_prompt_tokens: int | None = None    # client tokenizer (or the token ids sent)
    client_completion_tokens: int | None = None  # client tokenizer count of the streamed text
    client_token_chunks: int | None = None     # token-carrying chunks received
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    http_status: int | None = None
    worker_id: str | None = None
    send_lag_s: float = 0.0            # t_sent - t_scheduled: how far the client fell behind its plan

    def __post_init__(self) -> None:
        if self.status not in REQUEST_STATUSES:
            raise ValueError(f"status must be one of {REQUEST_STATUSES}, got {self.status!r}")
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be one of {ERROR_KINDS}, got {self.error_kind!r}")

    def derive(self) -> "RequestRecord":
        """Fill ttft/tpot/e2e from the timestamps with DESIGN section 4's definitions."""
        self.send_lag_s = max(0.0, self.t_sent - self.t_scheduled)
        if self.t_first_token is not None:
            self.ttft_s = self.t_first_token - self.t_sent
        if self.t_done is not None:
            self.e2e_s = self.t_done - self.t_sent
        n = self.output_tokens()
        if self.status == "ok" and self.ttft_s is not None and self.e2e_s is not None and n and n > 1:
            self.tpot_s = (self.e2e_s - self.ttft_s) / (n - 1)
        return self

    def output_tokens(self) -> int | None:
        """The best count of generated tokens: the server's usage, else the client tokenizer's count of
        the streamed text, else the number of token-carrying chunks (exact only for servers that
        send one token per chunk, as refengine and vLLM's default stream interval do)."""
        for n in (self.completion_tokens, self.client_completion_tokens, self.client_token_chunks):
            if n is not None:
                return n
        return None

    @classmethod
    def from_dict(cls, d: dict) -> "RequestRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class RunInfo:
    run_id: str
    command: list[str]
    target: dict[str, Any]             # {"url", "model", "kind": "embedded" | "external", "engine_args"?}
    sweep: dict[str, Any]              # the sweep spec (levels, workload, durations)
    slos: dict[str, float]
    host: dict[str, Any]
    tool_version: str
    schema_version: int = SCHEMA_VERSION
    status: str = "running"
    started: float = field(default_factory=time.time)
    finished: float | None = None
    probes: dict[str, Any] = field(default_factory=dict)   # probe name -> "ok" or why it could not run
    levels_done: list[str] = field(default_factory=list)
    # level id -> {"window_start", "window_end", "window_s", "notes"}: the measured window and the
    # client's own findings (fell behind, records missing), so a report can be rebuilt from files.
    level_meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {self.status!r}")


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def requests_jsonl(self) -> Path:
        return self.path / "requests.jsonl"

    @property
    def summary_json(self) -> Path:
        return self.path / "summary.json"

    def probe_file(self, name: str) -> Path:
        return self.path / "probes" / f"{name}.jsonl"

    # ----- writing -------------------------------------------------------------------------
    def create(self, info: RunInfo) -> None:
        self.path.mkdir(parents=True, exist_ok=False)
        (self.path / "probes").mkdir()
        self.write_info(info)

    def write_info(self, info: RunInfo) -> None:
        _atomic_write(self.run_json, json.dumps(asdict(info), indent=2))

    def append_records(self, records: list[RequestRecord]) -> None:
        with open(self.requests_jsonl, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(asdict(r), separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def set_aside_records(self, keep_levels: set[str]) -> int:
        """Move records of levels outside `keep_levels` to requests.interrupted.jsonl (on resume,
        a level that did not finish is run again; its first attempt is kept there). Returns how many."""
        if not self.requests_jsonl.exists():
            return 0
        keep, aside = [], []
        with open(self.requests_jsonl, encoding="utf-8") as f:
            for line in f:
                try:
                    level = json.loads(line).get("level_id")
                except json.JSONDecodeError:
                    continue     # a torn last line from the crash
                (keep if level in keep_levels else aside).append(line if line.endswith("\n") else line + "\n")
        if aside:
            with open(self.path / "requests.interrupted.jsonl", "a", encoding="utf-8") as f:
                f.writelines(aside)
        _atomic_write(self.requests_jsonl, "".join(keep))
        return len(aside)

    def write_summary(self, summary: dict) -> None:
        _atomic_write(self.summary_json, json.dumps(summary, indent=2, default=_json_default))

    # ----- reading -------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def read_info(self) -> RunInfo:
        try:
            return RunInfo(**json.loads(self.run_json.read_text()))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path} is not a run directory (no run.json)") from None

    def iter_records(self) -> Iterator[RequestRecord]:
        if not self.requests_jsonl.exists():
            return
        with open(self.requests_jsonl, encoding="utf-8") as f:
            for line in f:
                try:
                    yield RequestRecord.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError, ValueError):
                    continue   # a torn last line of a run that was killed mid-write

    def read_summary(self) -> dict | None:
        return json.loads(self.summary_json.read_text()) if self.summary_json.exists() else None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if dataclasses.is_dataclass(obj):
        return asdict(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
