"""A level's statistics (LevelStats) with docs/metrics.md's definitions; summarize.py computes them.

Percentiles are numpy's linear interpolation, always reported with their sample count; a P99
from fewer than 100 samples is flagged. Only requests sent inside the measured window count,
and errors are counted next to every row rather than silently left out. The distributions shown
are the successful requests'; the SLO verdict counts the failed ones too (analyzers.stats.slo
SloSample: a request that failed without a first token is over every TTFT bound), and
`ttft_p99_with_failures_s` is the TTFT P99 it used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from analyzers.stats.distribution import Distribution


@dataclass
class LevelStats:
    level_id: str
    concurrency: int | None
    request_rate: float | None
    input_len: int
    output_len: int
    window_s: float
    n_sent: int
    n_in_window: int
    n_ok: int
    n_error: int
    n_timeout: int
    n_cancelled: int
    errors_by_kind: dict[str, int]
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    send_lag: Distribution
    output_tok_s: float
    total_tok_s: float
    req_s: float
    goodput_req_s: float
    slo_met: bool | None
    token_count_mismatches: int
    output_len_unhonoured: int
    notes: list[str] = field(default_factory=list)
    error_rate: float = 0.0  # (errors + timeouts) / requests in the window
    output_tok_s_ci: list[float] | None = None
    req_s_ci: list[float] | None = None
    slo_broken: list[str] = field(default_factory=list)
    prompt_token_mismatches: int = 0
    # The client tokenizer's count of the streamed text against the server's usage: re-tokenizing
    # decoded text need not give the same ids, so this is reported as a difference, not an error.
    tokenizer_count_differs: int = 0
    tokenizer_count_diff_mean: float | None = None  # mean (client - server) / server
    error_samples: dict[str, str] = field(default_factory=dict)  # error kind -> one error text
    stall_s: float | None = None  # the longest server stall inside the window (analyzers.stalls)
    total_tok_s_ci: list[float] | None = None
    goodput_req_s_ci: list[float] | None = None
    # What was really sent and received (successful requests in the window): mean and [min, max].
    prompt_tokens_mean: float | None = None
    prompt_tokens_range: list[float] | None = None
    output_tokens_mean: float | None = None
    output_tokens_range: list[float] | None = None
    lengths_vary: bool = False  # the targets vary, or the measured lengths differ from them
    # usage vs streamed chunks, split: fewer chunks than tokens is a server sending multi-token chunks
    # (benign); more chunks than usage says means usage (or the stream) is wrong.
    multi_token_chunks: int = 0
    throughput_basis: str = "arrivals"  # tokens that arrived in the window (analyzers.stats.throughput)
    # What the SLO verdict rests on (analyzers.stats.slo.SloSample): errors and timeouts in the window
    # before their first token and after it, and the TTFT P99 of every request in the window (cancelled
    # aside) with those that failed without a first token as never answered. When that P99 falls among
    # them it is unbounded: ttft_p99_unbounded, and the value is what it is at least (their time to failure).
    n_failed_no_token: int = 0
    n_failed_mid_stream: int = 0
    ttft_p99_with_failures_s: float | None = None
    ttft_p99_unbounded: bool = False
    # Output token counts (docs/metrics.md): of the successful requests in the window, how many counts
    # are estimates (then TPOT and token throughput are too), and how many outputs were longer than
    # asked (of output_len_unhonoured). first_token_at_end: finished with no token-carrying chunk,
    # TTFT taken at the chunk that finished them (an upper bound), counted in the TTFT all the same.
    output_tokens_estimated: int = 0
    output_len_longer: int = 0
    first_token_at_end: int = 0
    # Streams the client read in one burst (analyzers/bursts.py): of those with enough chunks to judge,
    # and those too short to; the server's ITL mean the rule compared with (None: absolute bounds).
    # A level where enough of them burst is INVALID: its TTFT and TPOT were not measured.
    burst_streams: int = 0
    burst_judged: int = 0
    burst_unjudged: int = 0
    burst_server_itl_s: float | None = None
    burst_client_wait_share: float | None = None  # the load generator's run-queue wait: whose lag they were
    # A closed loop's window shorter than a request of the level (the median E2E of every request it
    # sent), or one that saw no request sent: its users' requests move in phase, so the tokens that
    # arrived in it are one phase of those requests (all prefill, or all decode), not a rate.
    window_shorter_than_request: bool = False

    @property
    def steady_output_tok_s(self) -> float | None:
        """output_tok_s where it is a rate; None where the window caught one phase (above)."""
        return steady_rate(self.output_tok_s, self.n_in_window, self.window_shorter_than_request)

    @property
    def load(self) -> float:
        """The level's load on one axis: concurrency, or request rate for open-loop levels."""
        return float(self.concurrency if self.concurrency is not None else (self.request_rate or 0.0))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LevelStats":
        known = set(cls.__dataclass_fields__)
        d = {k: v for k, v in d.items() if k in known}
        for key in ("ttft", "tpot", "itl", "e2e", "send_lag"):
            d[key] = Distribution(**d[key])
        return cls(**d)


def steady_rate(output_tok_s: float | None, n_in_window: int, window_shorter_than_request: bool) -> float | None:
    """A level's output tok/s where its window measured a rate, else None: no request sent inside
    it, or a closed loop's window shorter than its requests (LevelStats.window_shorter_than_request).
    The one rule for every reader that holds a throughput against something (predictions, departures)."""
    if not n_in_window or window_shorter_than_request:
        return None
    return output_tok_s
