"""A level in which no request finished: every stream was cut off by the level's end. Whether they had
started answering is said, with their TTFT, instead of "without an answer" for all of them."""

from __future__ import annotations

from analyzers.triage.levels import level_loads
from rundir import RequestRecord
from rundir.table import RequestTable


def _cut(level_id: str, c: int, first_token: bool) -> list[RequestRecord]:
    t0 = 1000.0
    return [
        RequestRecord(
            level_id=level_id,
            concurrency=c,
            request_rate=None,
            target_input_len=128,
            target_output_len=64,
            t_scheduled=t0,
            t_sent=t0 + 0.01 * u,
            t_first_token=(t0 + 6.0 * (1 + u // 4)) if first_token else None,
            t_done=t0 + 25.0,
            status="cancelled",
            in_window=False,
        ).derive()
        for u in range(c)
    ]


def _ok(level_id: str) -> list[RequestRecord]:
    return [
        RequestRecord(
            level_id=level_id,
            concurrency=1,
            request_rate=None,
            target_input_len=128,
            target_output_len=64,
            t_scheduled=900.0 + k,
            t_sent=900.0 + k,
            t_first_token=900.5 + k,
            t_done=901.0 + k,
            status="ok",
            in_window=True,
            prompt_tokens=128,
            completion_tokens=64,
            itl_s=[0.008] * 63,
        ).derive()
        for k in range(5)
    ]


def test_cut_off_streams_that_had_answered_are_told_apart_from_silent_ones():
    table = RequestTable.from_records(_ok("c1") + _cut("c16", 16, True) + _cut("c64", 64, False))
    by_id = {lv.level_id: lv for lv in level_loads(table, None, "ttft")}
    assert by_id["c16"].unfinished and by_id["c64"].unfinished
    assert (
        "all 16 were cut off" in by_id["c16"].why
        and "16 had their first token (TTFT median 14.9 s)" in by_id["c16"].why
    )
    assert by_id["c64"].why.endswith("without an answer")
