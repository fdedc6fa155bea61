"""A level against a server that streams the way llama-cpp-python's server does (issue 26): no
usage, text in only some of its one-chunk-per-token chunks, and a running stream cut off ([DONE]
without a finish_reason) when a newer request arrives. Cut streams are failures that break the SLO;
uncut ones count max_tokens tokens by their `length` finish, never their chunks."""

from __future__ import annotations

from loadgen_harness import run

from analyzers.stats.summarize import summarize_level
from loadgen import LevelSpec

OUT = 8


def _level(delay_server, concurrency: int):
    server = delay_server(ttft_ms=20, itl_ms=5, llama_cpp=True)
    spec = LevelSpec(
        f"c{concurrency}-in8-out{OUT}",
        concurrency=concurrency,
        input_len=8,
        output_len=OUT,
        warmup_s=0.2,
        duration_s=1.0,
        request_timeout_s=5.0,
        fail_fast=False,
    )
    lr = run(spec, server.target())
    return lr, summarize_level(lr.records, spec.level_id, spec.duration_s)


def test_streams_cut_by_a_newer_request_are_failures_that_break_the_slo(delay_server):
    lr, lv = _level(delay_server, 2)
    cut = [r for r in lr.in_window if r.error_kind == "cut_off"]
    assert cut and all(r.status == "error" for r in cut)
    assert all(r.error.startswith("cut off by the server: [DONE] without a finish_reason after ") for r in cut)
    assert lv.errors_by_kind.get("cut_off") == lv.n_error and lv.error_rate > 0
    assert lv.slo_met is False
    # before or after their first token, by when the newer request came (the SLO words: test_stream_accounting.py)
    mid = [r for r in cut if r.t_first_token is not None]
    assert lv.n_failed_mid_stream == len(mid) and lv.n_failed_no_token == len(cut) - len(mid)


def test_uncut_streams_count_max_tokens_by_their_length_finish_not_their_chunks(delay_server):
    lr, lv = _level(delay_server, 1)
    ok = [r for r in lr.in_window if r.status == "ok"]
    assert ok and len(ok) == len([r for r in lr.in_window if r.status != "cancelled"])
    for r in ok:
        assert r.completion_tokens is None and r.finish_reason == "length" and r.max_tokens == OUT
        assert r.client_token_chunks < OUT  # text in only some chunks
        assert r.output_tokens() == OUT and r.output_tokens_source == "length"
        assert r.tpot_s == (r.e2e_s - r.ttft_s) / (OUT - 1)
    assert lv.output_len_unhonoured == 0 and lv.output_tokens_estimated == 0
    assert lv.output_tokens_mean == OUT
    assert not any("did not get the requested" in n or "estimates" in n for n in lv.notes)
