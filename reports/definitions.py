"""The metric definitions every report prints (docs/metrics.md), and other tools' names for them,
so that a reader comparing our numbers with vLLM's, GenAI-Perf's or guidellm's compares like with like."""

from __future__ import annotations

DEFINITIONS = [
    ("TTFT", "time of the first chunk that carries a generated token − time the request was sent"),
    ("TPOT", "(E2E − TTFT) / (completion_tokens − 1); requests with one output token have none"),
    ("ITL", "each gap between consecutive token-carrying chunks, pooled over all requests of a level"),
    ("E2E", "time the stream ended − time the request was sent (queue time is server-side and inside it)"),
    ("send lag", "time a request was sent − time the plan wanted it sent: how far the client fell behind"),
    (
        "throughput",
        "output tokens/s and total (prompt + output) tokens/s that ARRIVED inside the measured window, by "
        "their timestamps (first token, then the inter-token gaps; a multi-token chunk's tokens spread over "
        "the request's chunks; prompt tokens at the first token), and requests/s that finished inside it, "
        "divided by the window's length: not quantized to whole requests",
    ),
    (
        "goodput",
        "requests/s that finished inside the window and met every SLO individually (TTFT, TPOT and E2E when set)",
    ),
    (
        "SLO verdict",
        "a level meets the SLO when TTFT P99, TPOT P95 (and E2E P99 when set) are within bounds; "
        "a level whose requests all failed misses it",
    ),
    (
        "percentiles",
        "P50, P90, P95, P99, P99.9 by numpy's linear interpolation, with the sample count; "
        "a P99 from fewer than 100 samples is flagged (*)",
    ),
    (
        "95% CI",
        "bootstrap interval: 1,000 resamples of the level's requests (the order-statistic form above "
        "5,000 samples) for percentiles; for throughput, the window cut into 20 time slices of what arrived, "
        "slices resampled with replacement (tight for a steady level, wide for a bursty one)",
    ),
    (
        "measured window",
        "a level warms up, then measures; requests sent inside the window count and are "
        "awaited, so long requests are not dropped; errors are counted beside every row",
    ),
    (
        "tokens",
        "the server's usage and the client's own count; disagreements and outputs that did not get "
        "the requested length are reported, not hidden",
    ),
]

OTHER_TOOLS_HEADER = ("llmbench", "vLLM benchmark_serving", "GenAI-Perf", "guidellm")
OTHER_TOOLS = [
    ("TTFT", "TTFT", "time to first token", "TTFT"),
    (
        "TPOT (excludes the first token)",
        "TPOT (“excl. 1st token”)",
        "“inter token latency” (per-request average)",
        "TPOT, whose average includes the first token",
    ),
    ("ITL (pooled gaps)", "ITL", "— (per-request average only)", "ITL"),
    ("E2E", "E2EL", "request latency", "request latency"),
    ("output tok/s", "output token throughput", "output token throughput", "output tokens/s"),
    ("goodput", "goodput (with --goodput)", "—", "—"),
]
