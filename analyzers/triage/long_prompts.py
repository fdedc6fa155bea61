"""The TTFT tail made of the long prompts themselves.

A prompt of 2,000 tokens waits for its own prefill before its first token, so where a few percent
of the traffic is long prompts, a level's TTFT P99 is theirs: nothing blocked anyone, the tail is
simply the requests that carry the most prefill. Head-of-line blocking (analyzers/triage/requests.py)
asks what long prompts did to the short ones and leaves the long ones out of its tail; this check
asks the complementary question, with the same machinery (analyzers/triage/exposure.py): is being
a long prompt (>= LONG_PROMPT_FACTOR x the run's median prompt, a condition of the request) what
separates the tail from the body? The answer is data about the workload, not a fault of the engine,
and the next step says how to judge and shorten it.
"""

from __future__ import annotations

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.exposure import differential, exposed_windows
from analyzers.triage.requests import LONG_PROMPT_FACTOR, long_prompts
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows
from rundir.table import RequestTable

LONG_PROMPTS_ID, LONG_PROMPTS_TITLE = "p99.sched.long-prompts", "the tail is not the long prompts' own prefill"
PREFILL_METRICS = ("ttft", "e2e")  # metrics a request's own prefill is part of
NEXT = (
    "a long prompt's TTFT is its own prefill: judge TTFT per prompt length (an SLO per input bucket), cap "
    "or summarize long prompts, or make prefill faster (TP, a faster device, prefill on replicas of its own); "
    "chunked prefill protects the short requests, not the long ones' own TTFT"
)


def check_long_prompts(table: RequestTable, tails: TailWindows) -> CheckResult:
    if tails.metric not in PREFILL_METRICS:
        return passed(
            LONG_PROMPTS_ID,
            "scheduling",
            LONG_PROMPTS_TITLE,
            f"a request's own prefill is not part of {tails.metric.upper()}",
        )
    start_col, end_col, value_col = METRIC_SPANS[tails.metric]
    df = table.df
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & df[value_col].notna().to_numpy()
    tokens = df["in_tokens"].to_numpy(float)
    if not measured.any() or not (tokens[measured] > 0).any():
        return unchecked(LONG_PROMPTS_ID, "scheduling", LONG_PROMPTS_TITLE, "no prompt token counts in the records")
    is_long, median = long_prompts(tokens, measured)
    if not is_long.any():
        return passed(
            LONG_PROMPTS_ID,
            "scheduling",
            LONG_PROMPTS_TITLE,
            f"no long prompts: every prompt is under {LONG_PROMPT_FACTOR:g}x the median of {median:.0f} tokens",
        )
    values = df[value_col].to_numpy(float)
    diff = differential(values, table.level_rows(), measured, is_long)
    long_tokens = float(np.median(tokens[is_long]))
    share = float(is_long.sum() / measured.sum())
    if not diff.separates:
        return passed(
            LONG_PROMPTS_ID,
            "scheduling",
            LONG_PROMPTS_TITLE,
            f"long prompts (~{long_tokens:.0f} tokens, {share:.0%} of the requests) do not make the tail: "
            f"{diff.tail_exposed:.0%} of it vs {diff.body_exposed:.0%} of the body",
            **diff.evidence(),
        )
    long_ttft = float(np.median(values[is_long]))
    evidence = dict(
        diff.evidence(),
        long_prompt_tokens_median=long_tokens,
        prompt_tokens_median=median,
        long_prompt_share=round(share, 3),
        long_prompt_latency_median_s=long_ttft,
    )
    starts, ends = df[start_col].to_numpy(float), df[end_col].to_numpy(float)
    title = (
        f"the {tails.metric.upper()} tail is the long prompts' own prefill: prompts of ~{long_tokens:.0f} tokens "
        f"({LONG_PROMPT_FACTOR:g}x+ the median of {median:.0f}; {share:.0%} of the requests, median "
        f"{long_ttft * 1000:.0f} ms); " + diff.words(tails.metric, "the long prompts", "were long prompts")
    )
    finding = Finding(
        LONG_PROMPTS_ID,
        "scheduling",
        "medium",
        title,
        evidence,
        exposed_windows(starts, ends, diff.exposed_tail_rows),
        len(tails.spikes),
        NEXT,
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, LONG_PROMPTS_TITLE, finding.title)
