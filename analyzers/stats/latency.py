"""Per-level latency and throughput statistics with docs/metrics.md's definitions.

Percentiles are numpy's linear interpolation, always reported with their sample count; a P99
from fewer than 100 samples is flagged. Only requests sent inside the measured window count,
and errors are counted next to every row rather than silently left out. The distributions shown
are the successful requests'; the SLO verdict counts the failed ones too (analyzers.stats.slo
SloSample: a request that failed without a first token is over every TTFT bound), and
`ttft_p99_with_failures_s` is the TTFT P99 it used. Everything is computed
on a RequestTable's columns (vectorized), so a million records take seconds, not minutes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Iterable

import numpy as np

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99, Distribution
from analyzers.stats.slo import Slos, SloSample
from analyzers.stats.throughput import level_rates
from analyzers.stats.token_accounting import account_tokens
from analyzers.stats.window import Window
from analyzers.validity import INVALID_PREFIX, level_validity, mark_not_measured, stall_words
from rundir import RequestRecord, SloSpec
from rundir.table import RequestTable


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


def summarize_level(
    records: "Iterable[RequestRecord] | RequestTable",
    level_id: str,
    window_s: float | Window,
    slos: "SloSpec | dict | None" = None,
    seed: int = 0,
    server_itl_s: float | None = None,
) -> LevelStats:
    """Statistics of one level from its records (or a RequestTable); `window_s` is the measured
    window's length (or a Window); `server_itl_s` the server's own ITL mean over it (server probe)."""
    table = records if isinstance(records, RequestTable) else RequestTable.from_records(records)
    rows = np.flatnonzero(table.df["level_id"].to_numpy() == level_id)
    window = window_s if isinstance(window_s, Window) else Window(float(window_s))
    return level_stats(table, rows, level_id, window, Slos.of(slos), np.random.default_rng(seed), server_itl_s)


def level_stats(
    table: RequestTable,
    rows: np.ndarray,
    level_id: str,
    window: Window,
    slos: Slos,
    rng: np.random.Generator,
    server_itl_s: float | None = None,
) -> LevelStats:
    """The statistics of the rows `rows` of `table` (one level's records); `server_itl_s`: the
    server's own ITL mean over the window, the reference of the burst-read rule (analyzers/bursts.py)."""
    if window.seconds <= 0:
        raise ValueError(f"the measured window must be positive, got {window.seconds}")
    df = table.df
    col = {
        name: df[name].to_numpy()[rows]
        for name in (
            "status",
            "in_window",
            "ttft_s",
            "tpot_s",
            "e2e_s",
            "send_lag_s",
            "out_tokens",
            "in_tokens",
            "t_sent",
            "completion_tokens",
            "client_completion_tokens",
            "client_token_chunks",
            "prompt_tokens",
            "client_prompt_tokens",
            "output_tokens_source",
            "finish_reason",
            "first_token_source",
            "target_input_len",
            "target_output_len",
            "error_kind",
            "error",
        )
    }
    win = col["in_window"]
    status = col["status"]
    ok = win & (status == "ok")
    failed = win & ((status == "error") | (status == "timeout"))
    ttft, tpot, e2e = col["ttft_s"][ok], col["tpot_s"][ok], col["e2e_s"][ok]
    ok_mask = np.zeros(len(df), dtype=bool)
    ok_mask[rows[ok]] = True

    d_ttft, d_tpot, d_e2e = (Distribution.of(v, rng) for v in (ttft, tpot, e2e))
    validity = level_validity(table, rows, window, server_itl_s)
    sample = SloSample.of(
        status[win], col["ttft_s"][win], col["tpot_s"][win], col["e2e_s"][win], col["target_output_len"][win]
    )
    slo_met, broken = slos.level_verdict(int(win.sum()), sample, validity.error_rate(int(failed.sum()), int(win.sum())))
    p99_all = sample.percentile("ttft_s", 99)
    unbounded = p99_all is not None and np.isinf(p99_all)
    if unbounded:
        p99_all = sample.lower_bound("ttft_s", 99)
    if validity.stall is not None:
        broken.append(stall_words(validity.stall, window))
        slo_met = False if slo_met is not None else None
    rates = level_rates(table, rows, window, slos, rng)
    lengths = _lengths(col, ok)

    errors_by_kind, error_samples = error_breakdown(col["error_kind"][failed], col["error"][failed])
    n_win = int(win.sum())
    n_error, n_timeout = int((win & (status == "error")).sum()), int((win & (status == "timeout")).sum())
    first = rows[0] if rows.size else None

    def first_of(name, default=None):
        if first is None:
            return default
        v = df[name].iat[first]
        return default if v != v else v  # NaN (a null in the record) -> default

    notes = []
    if d_ttft.n and not d_ttft.p99_reliable:
        notes.append(f"P99 from {d_ttft.n} samples (< {MIN_SAMPLES_FOR_P99}) is unreliable")
    acct = account_tokens(col, ok, int(first_of("target_output_len", 0)))
    notes += acct.notes
    at_end = int((ok & (col["first_token_source"] == "end")).sum())
    if at_end:
        notes.append(
            f"{at_end} requests finished with no token-carrying chunk: their TTFT is the time of the "
            "chunk that finished them (an upper bound)"
        )
    if validity.stall is not None:
        notes.append(INVALID_PREFIX + stall_words(validity.stall, window))
    if validity.carried_failed:
        notes.append(
            f"{validity.carried_failed} requests sent during the warm-up failed inside the window "
            "(counted in the error rate)"
        )
    concurrency = first_of("concurrency")
    input_len, output_len = nominal_lengths(
        level_id, col, int(first_of("target_input_len", 0)), int(first_of("target_output_len", 0))
    )
    lv = LevelStats(
        level_id=level_id,
        concurrency=None if concurrency is None else int(concurrency),
        request_rate=first_of("request_rate"),
        input_len=input_len,
        output_len=output_len,
        window_s=window.seconds,
        n_sent=int(rows.size),
        n_in_window=n_win,
        n_ok=int(ok.sum()),
        n_error=n_error,
        n_timeout=n_timeout,
        n_cancelled=int((win & (status == "cancelled")).sum()),
        errors_by_kind=errors_by_kind,
        ttft=d_ttft,
        tpot=d_tpot,
        itl=Distribution.of(table.gaps_of(ok_mask)),
        e2e=d_e2e,
        send_lag=Distribution.of(col["send_lag_s"][win]),
        output_tok_s=rates.values["output tok/s"],
        total_tok_s=rates.values["total tok/s"],
        req_s=rates.values["requests/s"],
        goodput_req_s=rates.values["goodput req/s"],
        slo_met=slo_met,
        token_count_mismatches=acct.mismatches,
        output_len_unhonoured=acct.unhonoured,
        notes=notes,
        error_rate=(n_error + n_timeout) / n_win if n_win else 0.0,
        output_tok_s_ci=rates.ci("output tok/s"),
        req_s_ci=rates.ci("requests/s"),
        total_tok_s_ci=rates.ci("total tok/s"),
        goodput_req_s_ci=rates.ci("goodput req/s"),
        multi_token_chunks=acct.multi_token_chunks,
        **lengths,
        slo_broken=broken,
        prompt_token_mismatches=acct.prompt_mismatches,
        error_samples=error_samples,
        stall_s=validity.stall.seconds if validity.stall else None,
        tokenizer_count_differs=acct.tokenizer_differs,
        tokenizer_count_diff_mean=acct.tokenizer_diff_mean,
        n_failed_no_token=sample.no_token,
        n_failed_mid_stream=sample.mid_stream,
        ttft_p99_with_failures_s=p99_all,
        ttft_p99_unbounded=bool(unbounded),
        output_tokens_estimated=acct.estimated,
        output_len_longer=acct.longer,
        first_token_at_end=at_end,
    )
    if validity.bursts is not None:
        b = validity.bursts
        lv.burst_streams, lv.burst_judged, lv.burst_unjudged, lv.burst_server_itl_s = (
            b.bursts,
            b.judged,
            b.unjudged,
            b.server_itl_s,
        )
        mark_not_measured(lv, b)
    return lv


_NOMINAL = re.compile(r"-in(\d+)-out(\d+)$")  # the sweep's level ids: c8-in512-out64, r2-in128-out64


def nominal_lengths(level_id: str, col: dict[str, np.ndarray], first_in: int, first_out: int) -> tuple[int, int]:
    """A level's prompt and output lengths as the sweep named them. Where the workload varies them per
    request (ShareGPT, mixed, a spread), the first record's targets say nothing about the level, so
    the level id's nominal lengths are used (levels of one sweep then stay in one scaling series);
    the measured lengths are in prompt_tokens_mean / output_tokens_mean."""
    m = _NOMINAL.search(level_id)
    vary = any(np.unique(v[~np.isnan(v)]).size > 1 for v in (col["target_input_len"], col["target_output_len"]))
    if m and vary:
        return int(m.group(1)), int(m.group(2))
    return first_in, first_out


def _lengths(col: dict[str, np.ndarray], ok: np.ndarray) -> dict:
    """Measured prompt and output lengths of the successful requests, and whether they vary."""
    out: dict = {}
    vary = False
    for name, measured, target in (
        ("prompt", "in_tokens", "target_input_len"),
        ("output", "out_tokens", "target_output_len"),
    ):
        v = col[measured][ok]
        v = v[~np.isnan(v) & (v > 0)]
        if v.size:
            out[f"{name}_tokens_mean"] = float(v.mean())
            out[f"{name}_tokens_range"] = [float(v.min()), float(v.max())]
            t = col[target][ok]
            vary |= bool(np.unique(t).size > 1 or abs(v.mean() - t[0]) > max(1.0, 0.02 * t[0]))
    out["lengths_vary"] = vary
    return out


def error_breakdown(kinds: np.ndarray, texts: np.ndarray) -> tuple[dict[str, int], dict[str, str]]:
    """Failed requests counted by error kind, with one error text of each kind."""
    counts: dict[str, int] = {}
    samples: dict[str, str] = {}
    for kind, text in zip(kinds, texts):
        key = kind if isinstance(kind, str) and kind else "unknown"  # null arrives as None or NaN
        counts[key] = counts.get(key, 0) + 1
        if isinstance(text, str) and text and key not in samples:
            samples[key] = text[:500]
    return counts, samples
