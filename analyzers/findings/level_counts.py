"""What a level's statistics say, as findings of the run (analyzers/findings/run.py groups them by kind
across levels): the SLO bounds it broke, errors and timeouts, a P99 from too few samples, outputs of
another length than asked, and token counts that disagree (the benign kinds explained once, here)."""

from __future__ import annotations

import re

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from analyzers.stats.latency import LevelStats
from analyzers.stats.token_accounting import TOKENIZER_DIFF_NOTE


def slo_findings(lv: LevelStats, add) -> None:
    """Each bound the level broke, one kind per bound (its own value beside the level)."""
    for broke in lv.slo_broken:
        if broke == "no successful requests":
            add(
                "no_successes",
                "slo",
                "No successful requests (the level served nobody, so it missed the SLO)",
                lv.level_id,
            )
            continue
        counted = _COUNTED.match(broke)  # "TTFT P99 > 3 s counting the 23 requests ... (bound 100 ms)"
        if counted:
            name, value, limit = counted.groups()
        else:  # "TTFT P99 250 ms > 100 ms"
            metric, bound, limit = broke.partition(" > ")
            if not bound:  # a stall or an interruption: said once as the level's INVALID note, not a bound
                continue
            name = " ".join(metric.split()[:2])  # "TTFT P99"
            value = metric[len(name) :].strip()
        add(f"over_slo:{name}", "slo", f"Over the SLO on {name} (bound {limit})", lv.level_id, value)


# A bound broken with failed requests counted (analyzers.stats.slo.Slos.broken_words).
_COUNTED = re.compile(r"^(\w+ P[\d.]+) (.+ counting the .+) \(bound ([^)]+)\)$")


def count_findings(lv: LevelStats, add) -> None:
    """What the level's counts say: errors, a thin P99, output lengths, token counts."""
    if lv.n_error + lv.n_timeout:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(lv.errors_by_kind.items()))
        add(
            "errors",
            "caveat",
            "Errors and timeouts",
            lv.level_id,
            f"{lv.n_error + lv.n_timeout} of {lv.n_in_window}, {lv.error_rate:.1%}: {kinds}",
        )
    if lv.ttft.n and lv.ttft.n < MIN_SAMPLES_FOR_P99:
        add(
            "p99_unreliable",
            "warning",
            f"P99 from fewer than {MIN_SAMPLES_FOR_P99} samples (unreliable)",
            lv.level_id,
            f"n={lv.ttft.n}",
        )
    if lv.output_len_unhonoured:
        # Only counts that say so (the server's usage, the client tokenizer), never estimates or a
        # `length` finish (analyzers.stats.token_accounting).
        longer = lv.output_len_longer
        split = f"{lv.output_len_unhonoured - longer} shorter, {longer} longer"
        add(
            "output_len",
            "warning",
            "Outputs of another length than requested, by the server's own count "
            "(shorter: it stopped before max_tokens, at EOS when ignore_eos was not sent or not honoured; "
            "longer: it did not honour max_tokens)",
            lv.level_id,
            f"{lv.output_len_unhonoured} of {lv.n_ok}, asked {lv.output_len}: {split}",
        )
    wrong = lv.token_count_mismatches - lv.multi_token_chunks
    if wrong > 0:
        add(
            "usage_below_chunks",
            "warning",
            "More token chunks streamed than the server's usage counts (its usage, or its stream, is wrong)",
            lv.level_id,
            f"{wrong} requests",
        )
    if lv.multi_token_chunks:
        add(
            "multi_token_chunks",
            "benign",
            "Some stream chunks carried more than one token",
            lv.level_id,
            f"{lv.multi_token_chunks} of {lv.n_ok} requests",
        )
    if lv.tokenizer_count_diff_mean is not None and abs(lv.tokenizer_count_diff_mean) >= TOKENIZER_DIFF_NOTE:
        add(
            "tokenizer_count",
            "benign",
            "The client's tokenizer counts a different number of output tokens than the server's usage",
            lv.level_id,
            f"{lv.tokenizer_count_diff_mean:+.0%}",
        )


BENIGN_EXPLAINED = {
    "multi_token_chunks": (
        "The server's usage counts tokens; the stream counts chunks. Some servers put two or more tokens in "
        "one chunk (an incremental detokenizer holds back a token that ends mid-character and sends it with "
        "the next one; vLLM's stream interval does it on purpose), so a request can have fewer chunks than "
        "tokens. Nothing is lost: TPOT and throughput use the usage count, and throughput spreads a "
        "request's tokens evenly over its chunks' arrival times. ITL is the gap between chunks."
    ),
    "tokenizer_count": (
        "The client re-tokenizes the streamed text with its own tokenizer. Decoding token ids to text and "
        "encoding the text again need not give the same ids (merges across chunk boundaries, special "
        "tokens, a different tokenizer), so the two counts differ a little. The server's usage is the "
        "count every statistic uses."
    ),
}
