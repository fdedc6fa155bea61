"""P99 check that needs only the requests: head-of-line blocking by long prefills (whether the client
itself fell behind is client_lag.py).

Head-of-line blocking leaves a signature in the timestamps alone: a short request stuck behind a
long prefill gets its first token within a step or two after that prefill ends (the long
request's first token). So a short request counts as "released by a long prefill" when a long
request's first token came while it was waiting and at most max(RELEASE_STEPS median inter-token
gaps, the median short TTFT) before its own first token (the step after a long prefill is often
the one that prefills the short prompts queued behind it), or in the same step (a short prompt
batched with the long prefill, whose first tokens arrive within a few ms of each other, in either
order). The window has the same length for every request, so a spike's
longer wait does not by itself make it more likely to be counted. The check asks whether released
short requests are far more likely to be in the TTFT tail than the others (a relative risk), and
whether most of the short tail is made of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.exposure import differential, exposed_windows
from analyzers.triage.tail_windows import TailWindows, Window, merge, spike_mask
from rundir.table import RequestTable

LONG_PROMPT_FACTOR = 4.0  # a long prompt is at least this many times the run's median prompt
MIN_SPIKES = 3  # fewer short spikes than this prove nothing either way
HOL_MIN_SHARE = 0.5  # at least half of the short spikes were released by a long prefill ...
HOL_MIN_RISK = 2.0  # ... and a released short request is at least twice as likely to spike
RELEASE_STEPS = 2.0  # "right after": within this many median inter-token gaps
MIN_RELEASE_S = 0.005
SAME_STEP_S = 0.010  # first tokens of one engine step reach the client this close together

HOL_ID, HOL_TITLE = "p99.sched.long-prefill", "long prefills blocking short requests (head-of-line)"


def holds_a_point(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each interval [starts[i], ends[i]], whether one of `points` falls inside it (O((n + m) log m))."""
    pts = np.sort(points)
    return np.searchsorted(pts, ends, side="right") > np.searchsorted(pts, starts, side="left")


def long_prompts(tokens: np.ndarray, among: np.ndarray) -> tuple[np.ndarray, float]:
    """Which of the `among` rows are long prompts (>= LONG_PROMPT_FACTOR x their median), and that median."""
    median = float(np.median(tokens[among]))
    return among & (tokens >= LONG_PROMPT_FACTOR * median), median


def check_hol_blocking(table: RequestTable, ttft: TailWindows) -> CheckResult:
    df = table.df
    ok = (df["status"] == "ok").to_numpy() & df["t_first_token"].notna().to_numpy()
    tokens = df["in_tokens"].to_numpy(float)
    if not ok.any() or not (tokens[ok] > 0).any():
        return unchecked(HOL_ID, "scheduling", HOL_TITLE, "no prompt token counts in the records")
    is_long, median = long_prompts(tokens, ok)
    if not is_long.any():
        return passed(
            HOL_ID,
            "scheduling",
            HOL_TITLE,
            f"no long prompts: every prompt is under {LONG_PROMPT_FACTOR:g}x the median of {median:.0f} tokens",
            max_prompt_tokens=float(tokens[ok].max()),
        )
    t_sent, t_first = df["t_sent"].to_numpy(float), df["t_first_token"].to_numpy(float)
    long_rows = np.flatnonzero(is_long)
    # The short requests' own tail: long prompts are slow to their first token by nature, and would
    # otherwise fill the level's tail by themselves.
    short_measured = ok & ~is_long & df["in_window"].to_numpy()
    # First what each short request lived through; the release pattern below is the fallback.
    pending = _hol_by_exposure(table, ttft, short_measured, long_rows, {})
    if pending is not None:
        return pending
    spike, _ = spike_mask(df["ttft_s"].to_numpy(float), table.level_rows(), short_measured)
    short_spikes, short_calm = np.flatnonzero(spike), np.flatnonzero(short_measured & ~spike)
    if short_spikes.size < MIN_SPIKES:
        return passed(
            HOL_ID,
            "scheduling",
            HOL_TITLE,
            f"{short_spikes.size} short requests in the TTFT tail (< {MIN_SPIKES}): nothing to explain",
            short_spikes=int(short_spikes.size),
        )

    long_done = t_first[long_rows]
    # "Right after": the first step or two after the long prefill, and a step that prefills the
    # queued short prompts takes about as long as a calm short request's TTFT, not one decode step.
    step_s = float(np.median(table.itl)) if table.itl.size else 0.0
    ttft_s = df["ttft_s"].to_numpy(float)
    release_s = max(RELEASE_STEPS * step_s, float(np.nanmedian(ttft_s[short_measured])), MIN_RELEASE_S)
    short = np.concatenate([short_spikes, short_calm])
    # A short prompt prefilled in the same step as the long one gets its first token in the same
    # flush, a few ms before or after the long one's: that is being blocked too.
    same_step_s = max(SAME_STEP_S, 0.5 * step_s)
    crossed = holds_a_point(
        np.maximum(t_sent[short], t_first[short] - release_s), t_first[short] + same_step_s, long_done
    )
    is_spike = np.arange(short.size) < short_spikes.size
    spike_hit = crossed[is_spike]
    spike_share = float(spike_hit.mean())
    risk_crossed = float(is_spike[crossed].mean()) if crossed.any() else 0.0
    risk_not = float(is_spike[~crossed].mean()) if (~crossed).any() else 0.0
    relative_risk = risk_crossed / risk_not if risk_not > 0 else (float("inf") if risk_crossed > 0 else 0.0)
    evidence: dict[str, Any] = dict(
        long_prompts=int(long_rows.size),
        long_prompt_tokens_median=float(np.median(tokens[long_rows])),
        short_prompt_tokens_median=float(np.median(tokens[ok & ~is_long])),
        short_spikes=int(short_spikes.size),
        release_window_s=release_s,
        short_spikes_released_by_long_prefill=spike_share,
        spike_rate_when_released=risk_crossed,
        spike_rate_otherwise=risk_not,
        relative_risk=relative_risk,
        short_spike_ttft_p50_s=float(np.median(ttft_s[short_spikes])),
        short_calm_ttft_p50_s=float(np.median(ttft_s[short_calm])) if short_calm.size else None,
    )
    if (~crossed).sum() == 0:
        return unchecked(
            HOL_ID,
            "scheduling",
            HOL_TITLE,
            "every short request was released by a long prefill: nothing to compare against (run a lighter level)",
        )
    if spike_share < HOL_MIN_SHARE or relative_risk < HOL_MIN_RISK:
        return passed(
            HOL_ID,
            "scheduling",
            HOL_TITLE,
            f"{spike_share:.0%} of short TTFT spikes got their first token right after a long prefill; "
            f"{_risk_words(relative_risk)}: no head-of-line pattern",
            **evidence,
        )
    blocked = short_spikes[spike_hit]
    scope = merge([Window(t_sent[i], t_first[i]) for i in short_spikes])
    explains = [w for w in scope if np.any((t_sent[blocked] <= w.end) & (t_first[blocked] >= w.start))]
    severity = "high" if spike_share >= 0.8 and relative_risk >= 2 * HOL_MIN_RISK else "medium"
    finding = Finding(
        HOL_ID,
        "scheduling",
        severity,
        f"{spike_share:.0%} of short requests in the TTFT tail got their first token right after a long prompt "
        f"(~{evidence['long_prompt_tokens_median']:.0f} tokens) finished prefilling; {_risk_words(relative_risk)}",
        evidence,
        explains,
        len(scope),
        "enable chunked prefill (--enable-chunked-prefill with a --max-num-batched-tokens budget) or cap long "
        "prefills (--long-prefill-token-threshold), or schedule short jobs first (--scheduling-policy sjf); "
        "then compare the runs with `llmbench compare`",
    )
    return failed(finding, HOL_TITLE, finding.title)


def _hol_by_exposure(
    table: RequestTable, ttft: TailWindows, short_measured: np.ndarray, long_rows: np.ndarray, evidence: dict
) -> CheckResult | None:
    """Head-of-line blocking as what each short request lived through: a long prompt still waiting for
    its first token when the short one arrived (analyzers/triage/exposure.py). Taken at the arrival,
    an instant, so a slow request is not more exposed for having waited longer. This finds the
    blocking where it is everywhere (chunked prefill off: every short request behind a long prefill
    is slow, no release pattern stands out against the others) and names it instead of saturation."""
    df = table.df
    t_sent, t_first = df["t_sent"].to_numpy(float), df["t_first_token"].to_numpy(float)
    order = np.argsort(t_sent[long_rows])
    l_sent, l_first = t_sent[long_rows][order], t_first[long_rows][order]
    exposed = np.zeros(len(df), dtype=bool)
    for i in np.flatnonzero(short_measured):
        k = np.searchsorted(l_sent, t_sent[i], side="right")  # long requests sent at or before it
        exposed[i] = bool(np.any(l_first[:k] > t_sent[i]))
    diff = differential(df["ttft_s"].to_numpy(float), table.level_rows(), short_measured, exposed)
    if not diff.separates:
        return None
    long_tokens = float(np.median(df["in_tokens"].to_numpy(float)[long_rows]))
    ev = dict(evidence, **diff.evidence(), long_prompts=int(long_rows.size), long_prompt_tokens_median=long_tokens)
    finding = Finding(
        HOL_ID,
        "scheduling",
        "high" if diff.attributable >= 0.6 else "medium",
        f"long prefills blocked short requests: short requests that arrived while a long prompt "
        f"(~{long_tokens:.0f} tokens) was waiting for its first token are the TTFT tail; "
        + diff.words("ttft", "a long prefill ahead of them"),
        ev,
        exposed_windows(t_sent, t_first, diff.exposed_tail_rows),
        len(ttft.spikes),
        "enable chunked prefill (--enable-chunked-prefill with a --max-num-batched-tokens budget) or cap long "
        "prefills (--long-prefill-token-threshold), or schedule short jobs first (--scheduling-policy sjf); "
        "then compare the runs with `llmbench compare`",
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, HOL_TITLE, finding.title)


def _risk_words(relative_risk: float) -> str:
    if relative_risk == float("inf"):
        return "no other short request spiked"
    return f"such requests spiked {relative_risk:.1f}x as often as the others"


def episode(windows: list[Window]) -> str:
    """A short description of windows for tables: how many, and the longest."""
    if not windows:
        return "-"
    longest = max(windows, key=lambda w: w.seconds)
    return f"{len(windows)} window(s), longest {longest.seconds:.1f} s"
