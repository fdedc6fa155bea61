"""RequestRecord: one request as the client saw it, one line of requests.jsonl.

The columnar reader (rundir.table) derives its column lists from this dataclass's field types,
so a field added here is a column there without a second list to keep in step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

REQUEST_STATUSES = ("ok", "error", "timeout", "cancelled")
# Error classes of the load generator's taxonomy (RequestRecord.error_kind).
# cut_off: the server ended the stream before the request got its tokens ([DONE] with no
# finish_reason, or short of a fixed output length; loadgen/sse.py, docs/run-format.md).
ERROR_KINDS = ("connect", "http_status", "stream_broken", "timeout", "bad_payload", "cut_off")
# Where a request's output token count came from, best first (RequestRecord.output_tokens_and_source;
# docs/metrics.md "Output token counts"). Only "chunks" is an estimate.
OUTPUT_TOKEN_SOURCES = ("usage", "length", "tokenizer", "chunks")
ESTIMATED_SOURCES = ("chunks",)


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are Unix epoch seconds (time.time())."""

    level_id: str
    concurrency: int | None
    request_rate: float | None
    target_input_len: int
    target_output_len: int
    t_scheduled: float  # when the plan wanted it sent
    t_sent: float  # when the request left the client
    t_first_token: float | None  # first chunk that carries a generated token
    t_done: float | None  # stream ended (or failed)
    status: str  # ok | error | timeout | cancelled
    in_window: bool  # sent inside the level's measured window
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None  # server usage
    client_prompt_tokens: int | None = None  # client tokenizer (or the token ids sent)
    client_completion_tokens: int | None = None  # client tokenizer count of the streamed text
    client_token_chunks: int | None = None  # token-carrying chunks received (not a token count)
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    http_status: int | None = None
    worker_id: str | None = None
    send_lag_s: float = 0.0  # t_sent - t_scheduled: how far the client fell behind its plan
    max_tokens: int | None = None  # as sent: a `length` finish means exactly this many tokens
    finish_reason: str | None = None  # the stream's last choice finish_reason
    first_token_source: str | None = None  # chunk | end (loadgen/sse.py: end is an upper bound)
    output_tokens_source: str | None = None  # usage | length | tokenizer | chunks (derive())
    # Which replica of a fleet served it: the router's response header (--replica-header), or the
    # URL the client picked when it balances over several itself; None with a single server.
    replica: str | None = None

    def __post_init__(self) -> None:
        if self.status not in REQUEST_STATUSES:
            raise ValueError(f"status must be one of {REQUEST_STATUSES}, got {self.status!r}")
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be one of {ERROR_KINDS}, got {self.error_kind!r}")

    def derive(self) -> "RequestRecord":
        """Fill ttft/tpot/e2e from the timestamps with docs/metrics.md's definitions."""
        self.send_lag_s = max(0.0, self.t_sent - self.t_scheduled)
        if self.t_first_token is not None:
            self.ttft_s = self.t_first_token - self.t_sent
        if self.t_done is not None:
            self.e2e_s = self.t_done - self.t_sent
        n, self.output_tokens_source = self.output_tokens_and_source()
        if self.status == "ok" and self.ttft_s is not None and self.e2e_s is not None and n and n > 1:
            self.tpot_s = (self.e2e_s - self.ttft_s) / (n - 1)
        return self

    def output_tokens(self) -> int | None:
        return self.output_tokens_and_source()[0]

    def output_tokens_and_source(self) -> tuple[int | None, str | None]:
        """The best count of generated tokens and where it came from (docs/metrics.md): the server's
        usage; else, when the stream finished by `length`, exactly max_tokens (the server's own
        accounting: it stopped because it had made that many); else the client tokenizer's count of
        the streamed text; else the token-carrying chunks, an estimate only (a server may pack
        several tokens in one chunk, or send a token with no text). rundir.table.derive_columns
        is the same order on columns."""
        if self.completion_tokens is not None:
            return self.completion_tokens, "usage"
        if self.finish_reason == "length" and self.max_tokens is not None:
            return self.max_tokens, "length"
        if self.client_completion_tokens is not None:
            return self.client_completion_tokens, "tokenizer"
        if self.client_token_chunks is not None:
            return self.client_token_chunks, "chunks"
        return None, None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestRecord":
        return cls(**{k: v for k, v in d.items() if k in RECORD_FIELDS})


RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestRecord))


def _columns_of(*type_names: str) -> tuple[str, ...]:
    """Field names whose annotation (a string, under `from __future__ import annotations`) is one of these."""
    return tuple(f.name for f in dataclasses.fields(RequestRecord) if str(f.type) in type_names)


# The columnar table's columns, by kind. Numbers become float64 (NaN for null), strings stay objects.
FLOAT_COLUMNS = _columns_of("int", "int | None", "float", "float | None")
TEXT_COLUMNS = _columns_of("str", "str | None")
BOOL_COLUMNS = _columns_of("bool")
LIST_COLUMNS = _columns_of("list[float]")
assert set(FLOAT_COLUMNS + TEXT_COLUMNS + BOOL_COLUMNS + LIST_COLUMNS) == RECORD_FIELDS, (
    "every RequestRecord field has a column kind"
)
