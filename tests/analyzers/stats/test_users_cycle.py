"""A closed loop's window rate against its users' own cycle (analyzers/stats/users_cycle.py)."""

from __future__ import annotations

import pytest

from analyzers.stats.summarize import summarize_level
from analyzers.stats.users_cycle import UsersCycle, cycle_notes, users_cycle
from analyzers.stats.window import Window
from rundir import RequestRecord

T0 = 1000.0
USERS, CYCLE_S, PREFILL_S, TOKENS = 8, 3.0, 2.0, 11  # each request: 2 s to its first token, 10 gaps of 0.1 s


def request(t_sent: float, window: Window) -> RequestRecord:
    r = RequestRecord(
        level_id="c8",
        concurrency=USERS,
        request_rate=None,
        target_input_len=64,
        target_output_len=TOKENS,
        t_scheduled=t_sent,
        t_sent=t_sent,
        t_first_token=t_sent + PREFILL_S,
        t_done=t_sent + CYCLE_S,
        status="ok",
        in_window=window.start <= t_sent < window.end,
        prompt_tokens=64,
        completion_tokens=TOKENS,
        client_completion_tokens=TOKENS,
        itl_s=[0.1] * (TOKENS - 1),
    )
    return r.derive()


def closed_loop(window: Window, offset_per_user: float) -> list[RequestRecord]:
    """USERS users, each sending its next request as its last one ends, user u starting at
    u x offset_per_user: 0 is a convoy (all in phase), CYCLE_S / USERS spreads them evenly."""
    records = []
    for u in range(USERS):
        t = T0 - 2 * CYCLE_S + u * offset_per_user
        while t < window.end + CYCLE_S:
            records.append(request(t, window))
            t += CYCLE_S
    return records


def test_a_convoy_whose_window_cuts_its_bursts_unevenly_is_a_note():
    """Window [0.5, 7.5) after a cycle start: it holds the bursts at [2, 3) and [5, 6) and none of the
    third, 2 x 8 x 11 tokens in 7 s = 25.1 tok/s where the users serve 8 x 11 / 3 s = 29.3."""
    window = Window(7.0, start=T0 + 0.5, end=T0 + 7.5)
    lv = summarize_level(closed_loop(window, 0.0), "c8", window)
    assert lv.output_tok_s == pytest.approx(2 * USERS * TOKENS / 7.0)
    [note] = [n for n in lv.notes if "move in phase" in n]
    assert "-14% from its 8 users' own" in note and "29.3 tok/s" in note
    assert "holds 2.3 of their cycles" in note and "a --duration of 20 s or more" in note


def test_its_neighbours_are_not_notes():
    # The same users spread over their cycle: the window's rate is theirs.
    window = Window(7.0, start=T0 + 0.5, end=T0 + 7.5)
    spread = summarize_level(closed_loop(window, CYCLE_S / USERS), "c8", window)
    assert not [n for n in spread.notes if "move in phase" in n]
    # The convoy in a window of whole cycles: every burst counted once.
    whole = Window(9.0, start=T0 + 0.5, end=T0 + 9.5)
    assert not [n for n in summarize_level(closed_loop(whole, 0.0), "c8", whole).notes if "move in phase" in n]


def test_where_littles_law_does_not_hold_the_rate_there_is_no_check():
    import numpy as np

    e2e, out = np.full(8, 3.0), np.full(8, 11.0)
    assert users_cycle(None, e2e, out, 0, 20.0, 10.0) is None  # an open loop
    assert users_cycle(8, e2e, out, 1, 20.0, 10.0) is None  # a failure in the window
    assert users_cycle(16, e2e, out, 0, 20.0, 10.0) is None  # fewer requests than users
    assert users_cycle(8, e2e, out, 0, 2.0, 10.0) is None  # a window shorter than a request
    check = users_cycle(8, e2e, out, 0, 20.0, 29.0)
    assert check is not None and check.cycle_tok_s == pytest.approx(8 * 11 / 3.0)
    assert cycle_notes(check) == []  # 1% apart


def test_a_cycle_without_users_is_refused():
    with pytest.raises(ValueError):
        UsersCycle(users=0, cycle_s=1.0, out_tokens=10, window_s=10, window_tok_s=1.0)
