"""Output token counts by their source, estimates said as such, the output-length finding only from
counts that can say so, and cut-off streams as failures in the SLO (issue 26; docs/metrics.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from synth_run import make_run, rec

from analyzers.stats.summarize import summarize_level
from analyzers.summary import analyze_run
from rundir.table import RequestTable

OUT = 16


def _no_usage(r, finish: str | None, chunks: int, tokenizer: int | None = None, max_tokens: int = OUT):
    """`r` as a server without usage streamed it: `chunks` token-carrying chunks, then `finish`."""
    r.completion_tokens, r.client_completion_tokens = None, tokenizer
    r.client_token_chunks, r.finish_reason, r.max_tokens = chunks, finish, max_tokens
    return r.derive()


def test_output_tokens_source_order_and_the_table_agree():
    base = rec(0, 0.1, 0.5, OUT)
    cases = [
        (dataclasses.replace(base, finish_reason="length", max_tokens=OUT), OUT, "usage"),
        (_no_usage(dataclasses.replace(base), "length", 7, tokenizer=15), OUT, "length"),
        (_no_usage(dataclasses.replace(base), "stop", 7, tokenizer=15), 15, "tokenizer"),
        (_no_usage(dataclasses.replace(base), "stop", 7), 7, "chunks"),
    ]
    for r, n, source in cases:
        assert r.output_tokens_and_source() == (n, source) and r.output_tokens_source == source
        assert r.tpot_s == (r.e2e_s - r.ttft_s) / (n - 1)
    df = RequestTable.from_records([r for r, _, _ in cases]).df
    assert list(df["out_tokens"]) == [n for _, n, _ in cases]
    assert list(df["output_tokens_source"]) == [s for _, _, s in cases]


def test_length_finish_without_usage_is_not_an_unhonoured_length_nor_an_estimate():
    # llama_cpp.server: 16 tokens in 7.2 text chunks, no usage; the chunk count used to be the tokens
    records = [_no_usage(rec(i * 0.5, 0.1, 0.5, OUT), "length", 7) for i in range(20)]
    lv = summarize_level(records, "c1", 10.0)
    assert lv.output_len_unhonoured == 0 and lv.output_tokens_estimated == 0 and lv.output_tokens_mean == OUT
    assert lv.tpot.p["p50"] == pytest.approx((0.5 - 0.1) / (OUT - 1))


def test_estimated_counts_are_said_and_never_judge_the_output_length(tmp_path):
    records = [_no_usage(rec(i * 0.5, 0.1, 0.5, OUT), "stop", 7) for i in range(20)]
    lv = summarize_level(records, "c1", 10.0)
    assert lv.output_tokens_estimated == 20 and lv.output_len_unhonoured == 0
    assert any("output token counts of 20 of 20 requests are estimates" in n and "TPOT" in n for n in lv.notes)
    s = analyze_run(make_run(tmp_path / "run", records, {"c1": (0, 10)}))[0]
    by = {f.kind: f for f in s.finding_groups}
    assert "output_len" not in by
    assert any("are estimates" in f.text for f in s.finding_groups)


def test_usage_short_of_the_request_is_found_in_true_words(tmp_path):
    records = [rec(i * 0.5, 0.1, 0.5, 5, target_out=8) for i in range(20)]
    for r in records:
        r.finish_reason = "stop"
    lv = summarize_level(records, "c1", 10.0)
    assert lv.output_len_unhonoured == 20 and lv.output_len_longer == 0
    assert any(
        n.startswith("20 requests did not get the requested 8 output tokens by the server's count (20 shorter")
        for n in lv.notes
    )
    s = analyze_run(make_run(tmp_path / "run", records, {"c1": (0, 10)}))[0]
    f = {f.kind: f for f in s.finding_groups}["output_len"]
    assert "stopped before max_tokens" in f.text and "20 shorter, 0 longer" in f.text


def test_cut_off_after_tokens_fails_the_slo_as_cut_off_mid_stream():
    ok = [rec(i * 0.25, 0.05, 0.2, OUT) for i in range(36)]
    cut = [
        rec(
            9 + i * 0.25,
            0.05,
            0.1,
            OUT,
            status="error",
            kind="cut_off",
            error="cut off by the server: [DONE] without a finish_reason after 3 tokens",
        )
        for i in range(4)
    ]
    lv = summarize_level(ok + cut, "c1", 10.0)
    assert lv.n_error == 4 and lv.errors_by_kind == {"cut_off": 4} and lv.n_failed_mid_stream == 4
    assert lv.slo_met is False
    assert any("TPOT P95 > " in b and "the 4 requests cut off mid-stream" in b for b in lv.slo_broken)


def test_first_tokens_timed_at_the_end_are_counted_and_said():
    records = [rec(i * 0.5, 0.1, 0.5, OUT) for i in range(20)]
    records[3].first_token_source = "end"
    lv = summarize_level(records, "c1", 10.0)
    assert lv.first_token_at_end == 1 and lv.ttft.n == 20
    assert any("1 requests finished with no token-carrying chunk" in n for n in lv.notes)
    assert np.isfinite(lv.ttft.p["p99"])
