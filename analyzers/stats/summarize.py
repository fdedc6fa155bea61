"""One level's records into its LevelStats (latency.py): the requests of its measured window, their
distributions, the SLO verdict and goodput, the rates, the token accounting, the lengths, the
errors, and the validity notes (a stall, streams read in bursts). Everything is computed on a
RequestTable's columns (vectorized), so a million records take seconds, not minutes.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99, Distribution
from analyzers.stats.error_kinds import error_breakdown
from analyzers.stats.latency import LevelStats
from analyzers.stats.lengths import measured_lengths, nominal_lengths
from analyzers.stats.slo import Slos, SloSample
from analyzers.stats.throughput import level_rates
from analyzers.stats.token_accounting import account_tokens
from analyzers.stats.users_cycle import cycle_notes, users_cycle
from analyzers.stats.window import Window
from analyzers.validity import INVALID_PREFIX, level_validity, mark_not_measured, stall_words
from rundir import RequestRecord, SloSpec
from rundir.table import RequestTable


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
    client_waited: float | None = None,
) -> LevelStats:
    """The statistics of the rows `rows` of `table` (one level's records); `server_itl_s`: the
    server's own ITL mean over the window, the reference of the burst-read rule, and `client_waited`
    the load generator's run-queue wait share over it, whose lag bursts were (analyzers/bursts.py)."""
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
    validity = level_validity(table, rows, window, server_itl_s, client_waited)
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
    lengths = measured_lengths(col, ok)

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
    shorter = window_shorter_than_request(col, window, closed_loop=first_of("concurrency") is not None)
    if shorter is not None and n_win:
        notes.append(
            f"the {window.seconds:.0f}-s window is shorter than a request of this level (E2E P50 "
            f"{shorter:.1f} s): its users' requests move in phase, so its throughput is one phase of them, "
            "not a rate (a longer --duration measures it)"
        )
    notes += cycle_notes(
        users_cycle(
            first_of("concurrency"),
            col["e2e_s"][ok].astype(float),
            col["out_tokens"][ok].astype(float),
            int(failed.sum()),
            window.seconds,
            rates.values["output tok/s"],
        )
    )
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
        window_shorter_than_request=shorter is not None or n_win == 0,
    )
    if validity.bursts is not None:
        b = validity.bursts
        lv.burst_streams, lv.burst_judged, lv.burst_unjudged, lv.burst_server_itl_s = (
            b.bursts,
            b.judged,
            b.unjudged,
            b.server_itl_s,
        )
        lv.burst_client_wait_share = b.client_waited
        mark_not_measured(lv, b)
    return lv


def window_shorter_than_request(col: dict, window: Window, closed_loop: bool) -> float | None:
    """The median E2E of every successful request a closed-loop level sent (warm-up and window
    alike) when the window is shorter than it, else None. Open-loop arrivals are not in phase: a
    short window still samples a rate there."""
    if not closed_loop:
        return None
    e2e = col["e2e_s"][col["status"] == "ok"].astype(float)
    e2e = e2e[np.isfinite(e2e)]
    if not e2e.size:
        return None
    median = float(np.median(e2e))
    return median if window.seconds < median else None
