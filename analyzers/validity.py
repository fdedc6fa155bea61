"""Whether a level's figures are a measurement at all (issue 14: a sweep never reports a broken
level as one): a server stall inside the window, failures of warm-up requests that happened inside
it, a level cut short (interrupted, the target gone) whose window is what was really measured, and
a client that fell behind the server so that its streams arrived in one burst (issue 26,
analyzers/bursts.py: their TTFT and TPOT are the client's lag, not the server's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.bursts import BurstReads, level_bursts
from analyzers.stalls import Stall, longest_stall
from analyzers.stats.window import Window
from rundir.table import RequestTable

INVALID_PREFIX = "INVALID: "  # a level note that makes the level no valid measurement


@dataclass
class Validity:
    stall: Stall | None
    carried_failed: int  # sent in warm-up, failed inside the window
    carried_in_flight: int  # sent in warm-up, still in flight when the window opened
    bursts: BurstReads | None = None  # streams the client read in one burst (None: no successful stream)

    def error_rate(self, n_failed: int, n_in_window: int) -> float:
        total = n_in_window + self.carried_in_flight
        return (n_failed + self.carried_failed) / total if total else 0.0


def level_validity(
    table: RequestTable,
    rows: np.ndarray,
    window: Window,
    server_itl_s: float | None = None,
    client_waited: float | None = None,
) -> Validity:
    """`server_itl_s`: the server's own ITL mean over the window (server probe), the bursts' reference;
    `client_waited`: the load generator's run-queue wait share over it (host probe), whose lag they were."""
    df = table.df
    bursts = level_bursts(table, rows, server_itl_s, client_waited) if rows.size else None
    if window.start is None or rows.size == 0:
        return Validity(None, 0, 0, bursts)
    sent = df["t_sent"].to_numpy()[rows]
    done = np.nan_to_num(df["t_done"].to_numpy()[rows], nan=np.inf)
    status = df["status"].to_numpy()[rows]
    carried = (~df["in_window"].to_numpy()[rows]) & (sent < window.start) & (done >= window.start)
    failed = carried & ((status == "error") | (status == "timeout"))
    return Validity(longest_stall(table, rows, window), int(failed.sum()), int(carried.sum()), bursts)


def stall_words(stall: Stall, window: Window) -> str:
    return (
        f"the server delivered no token for {stall.seconds:.1f} s inside the window (from "
        f"+{stall.start - (window.start or stall.start):.1f} s) while {stall.in_flight} requests waited"
    )


def mark_not_measured(lv, bursts: BurstReads) -> None:
    """A level whose client fell behind (its streams arrived in bursts): its TTFT and TPOT are the
    client's lag, so it has no SLO verdict (neither met nor missed: never the highest load within
    the SLO) and the level is INVALID with the sentence that says why and what to do. Fewer bursts
    than fail a level are a note."""
    if not bursts.bursts:
        return
    words = bursts.words()
    if not bursts.fails:  # too few, or sent so by the server: a note
        lv.notes.append(words)
        return
    lv.slo_met = None
    if words not in lv.slo_broken:
        lv.slo_broken.append(words)
        lv.notes.append(INVALID_PREFIX + bursts.note())


def cut_short_words(measured_s: float, nominal_s: float) -> str:
    return f"interrupted: measured {measured_s:.1f} s of its {nominal_s:.0f} s window"


def mark_cut_short(lv, measured_s: float, nominal_s: float) -> None:
    """A level that did not run its whole window: its figures stand for what was measured, and it
    has no SLO verdict (so it is never the highest load within the SLO)."""
    words = cut_short_words(measured_s, nominal_s)
    lv.slo_met = None
    if words not in lv.slo_broken:
        lv.slo_broken.append(words)
        lv.notes.append(INVALID_PREFIX + words)


def mark_over_capacity(lv, reason: str) -> None:
    """A level stopped early because its queue kept growing (loadgen.saturation): it is over
    capacity, so it missed the SLO (never within it), and its figures cover what ran."""
    words = "over capacity: stopped early" + (f" ({reason})" if reason else "")
    lv.slo_met = False
    if words not in lv.slo_broken:
        lv.slo_broken.append(words)
        lv.notes.append(words)
