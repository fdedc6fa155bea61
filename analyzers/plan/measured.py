"""A run's measured levels in the planner's terms (the summary's own statistics, docs/metrics.md)."""

from __future__ import annotations

from analyzers.stats.latency import steady_rate
from analyzers.summary import analyze_run
from rundir import RunDir


def level_metrics(level: dict) -> dict[str, float | None]:
    """summary.json's level -> ttft_p50_s, ttft_p99_s, tpot_p50_s, tpot_p95_s, output_tok_s,
    tpot_mean_s (what the fit holds the step time to: throughput follows the mean, not the median) and
    ttft_mean_s."""

    def p(dist: str, q: str) -> float | None:
        return ((level.get(dist) or {}).get("p") or {}).get(q)

    out = {
        "ttft_p50_s": p("ttft", "p50"),
        "ttft_p99_s": p("ttft", "p99"),
        "tpot_p50_s": p("tpot", "p50"),
        "tpot_p95_s": p("tpot", "p95"),
        # None where the window caught one phase of the requests, not a rate (docs/metrics.md)
        "output_tok_s": steady_rate(
            level.get("output_tok_s"), level.get("n_in_window", 1), level.get("window_shorter_than_request", False)
        ),
        "tpot_mean_s": (level.get("tpot") or {}).get("mean"),
        # the client's mean TTFT: with the server's own mean, what the fit reads the prefill from
        "ttft_mean_s": (level.get("ttft") or {}).get("mean"),
    }
    return out


def measured_levels(run: RunDir) -> dict[str, dict[str, float | None]]:
    """Level id -> its measured metrics, from summary.json, or computed from the records if it is absent."""
    summary = run.read_summary()
    if summary is None or not summary.get("levels"):
        summary = analyze_run(run)[0].to_dict()
    return {lv["level_id"]: level_metrics(lv) for lv in summary.get("levels", [])}
