"""Prometheus /metrics text -> one engine-neutral snapshot, and per-interval quantiles from the
difference of two histogram snapshots (a quantile is a bucket, and a value only where the bucket
has two finite edges: QuantileEstimate, docs/probes.md).

Engines name the same things differently; CANONICAL maps our name to the candidates, first
present wins: refengine and vLLM (new names, then the pre-v1 names), SGLang, TGI. Values of
the same sample name with different labels (e.g. several model_name or engine labels) are summed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# gauges and counters: canonical -> candidate sample names (counters with their _total suffix)
CANONICAL = {
    "kv_usage": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"],
    "running": ["vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"],
    "waiting": ["vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"],
    "preemptions_total": ["vllm:num_preemptions_total", "sglang:num_retracted_requests_total"],
    # SGLang's `num_retracted_reqs` is a gauge: the requests retracted (preempted) in its latest
    # batch, not a running count, so it is its own field and never differenced like a counter.
    "retracted": ["sglang:num_retracted_reqs"],
    "prefix_cache_queries_total": ["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"],
    "prefix_cache_hits_total": ["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"],
    # engines that only export a hit-rate gauge (SGLang; vLLM v0)
    "prefix_cache_hit_rate_gauge": ["sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate"],
    "prompt_tokens_total": ["vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "tgi_request_input_length_sum"],
    "generation_tokens_total": [
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "tgi_request_generated_tokens_sum",
    ],
}
# histograms (seconds): canonical -> candidate family names
HISTOGRAMS = {
    "ttft": ["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"],
    "queue_time": ["vllm:request_queue_time_seconds", "sglang:queue_time_seconds", "tgi_request_queue_duration"],
    # vLLM v1 (and refengine) split a request's life: queued -> prefill (first scheduled to first
    # token) -> decode (first token to finish). The standing-tail diagnosis reads these.
    "prefill_time": ["vllm:request_prefill_time_seconds"],
    "decode_time": ["vllm:request_decode_time_seconds"],
    "itl": [
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
        "tgi_request_mean_time_per_token_duration",
    ],
    "e2e": ["vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", "tgi_request_duration"],
}
QUANTILES = (0.5, 0.9, 0.99)
# Shares (0..1) are not additive over label sets (several engines or data-parallel ranks): the
# fullest one is what matters for saturation, so these take the max instead of the sum.
MAX_OVER_LABELS = ("kv_usage", "prefix_cache_hit_rate_gauge")
# Info metrics (value 1, the configuration in labels) the probes and target facts read.
INFO_METRICS = ("vllm:cache_config_info", "refengine:quantization_info")


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count (+inf included)
    count: float = 0.0
    sum: float = 0.0


@dataclass
class Snapshot:
    engine: str  # refengine | vllm | sglang | tgi | unknown
    values: dict[str, float]  # canonical gauges/counters present on the page
    histograms: dict[str, Histogram]  # canonical histograms present on the page
    metric_count: int = 0  # samples on the page
    info: dict[str, dict[str, str]] = field(default_factory=dict)  # INFO_METRICS name -> labels
    by_name: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)  # raw samples of note
    # A data-parallel server (vLLM's DP engines, a refengine fleet's front): the PER_ENGINE gauges of
    # each `engine` label value, when the page has two or more; {} otherwise.
    per_engine: dict[str, dict[str, float]] = field(default_factory=dict)


# The gauges kept per data-parallel engine: where one replica's queue or KV cache stands apart.
PER_ENGINE = ("running", "waiting", "kv_usage")
ENGINE_LABEL = "engine"


@dataclass
class _Page:
    """The samples of one page added up by name, before the canonical names are picked."""

    sums: dict[str, float] = field(default_factory=dict)  # sample name -> sum over its label sets
    maxima: dict[str, float] = field(default_factory=dict)  # sample name -> max over its label sets
    hists: dict[str, Histogram] = field(default_factory=dict)  # family name -> its histogram
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    by_name: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    engines: dict[str, dict[str, float]] = field(default_factory=dict)  # engine label -> sample name -> sum
    count: int = 0  # samples read, NaN ones included

    def add(self, family, s) -> None:
        self.count += 1
        value = float(s.value)
        if math.isnan(value):
            return
        self.sums[s.name] = self.sums.get(s.name, 0.0) + value
        self.maxima[s.name] = max(self.maxima.get(s.name, value), value)
        if ENGINE_LABEL in s.labels:
            mine = self.engines.setdefault(s.labels[ENGINE_LABEL], {})
            mine[s.name] = mine.get(s.name, 0.0) + value
        if s.name in INFO_METRICS and value == 1:
            self.info[s.name] = dict(s.labels)
        elif s.name.startswith("refengine:model_memory_bytes"):
            self.by_name.setdefault("refengine:model_memory_bytes", []).append((dict(s.labels), value))
        if family.type == "histogram" or s.name.endswith(("_bucket", "_count", "_sum")):
            _add_histogram_sample(self.hists, family.name, s.name, s.labels, value)


def _first_present(table: dict[str, list[str]], present) -> dict[str, str]:
    """canonical -> the first of its candidate names for which present(name) holds."""
    out = {}
    for canon, names in table.items():
        name = next((n for n in names if present(n)), None)
        if name is not None:
            out[canon] = name
    return out


def parse_metrics(text: str) -> Snapshot:
    """Raises ValueError (with the parser's reason) when the text is not Prometheus exposition format."""
    page = _Page()
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                page.add(family, s)
    except Exception as exc:  # noqa: BLE001 - any parser error (ValueError, IndexError, ...) means bad input
        raise ValueError(f"not Prometheus text format ({type(exc).__name__}: {exc})") from None
    values = {
        canon: page.maxima[name] if canon in MAX_OVER_LABELS else page.sums[name]
        for canon, name in _first_present(CANONICAL, lambda n: n in page.sums).items()
    }
    # Only with buckets: a summary, or a counter whose name ends in _count or _sum, is no histogram.
    histograms = {
        canon: page.hists[name]
        for canon, name in _first_present(HISTOGRAMS, lambda n: n in page.hists and page.hists[n].buckets).items()
    }
    return Snapshot(
        engine=_engine(page.sums),
        values=values,
        histograms=histograms,
        metric_count=page.count,
        info=page.info,
        by_name=page.by_name,
        per_engine=_per_engine(page),
    )


def _per_engine(page: _Page) -> dict[str, dict[str, float]]:
    if len(page.engines) < 2:
        return {}
    names = _first_present({k: CANONICAL[k] for k in PER_ENGINE}, lambda n: n in page.sums)
    return {
        engine: {canon: samples[name] for canon, name in names.items() if name in samples}
        for engine, samples in page.engines.items()
    }


def _add_histogram_sample(hists, family: str, name: str, labels: dict, value: float) -> None:
    h = hists.setdefault(family, Histogram())
    if name.endswith("_bucket") and "le" in labels:
        try:
            le = float(labels["le"])
        except ValueError:
            return
        h.buckets[le] = h.buckets.get(le, 0.0) + value
    elif name.endswith("_count"):
        h.count += value
    elif name.endswith("_sum"):
        h.sum += value


def _engine(samples: dict[str, float]) -> str:
    names = samples.keys()
    if any(n.startswith("refengine:") for n in names):
        return "refengine"
    for prefix, engine in (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi")):
        if any(n.startswith(prefix) for n in names):
            return engine
    return "unknown"


def histogram_delta(prev: Histogram | None, cur: Histogram) -> Histogram:
    """What was observed between two scrapes (a server restart resets counters: take cur as is)."""
    if prev is None or cur.count < prev.count:
        return cur
    return Histogram(
        {le: max(c - prev.buckets.get(le, 0.0), 0.0) for le, c in cur.buckets.items()},
        cur.count - prev.count,
        cur.sum - prev.sum,
    )


@dataclass(frozen=True)
class QuantileEstimate:
    """Where a quantile of a histogram lies: in the bucket (lo, hi]. Buckets say how many
    observations fell between two edges and nothing about where between them, so:

    - in the first bucket (lower edge 0) it is known only to be < hi: `value` is None (Prometheus'
      interpolation from 0 would invent it; vLLM's request-phase histograms start at 0.3 s, so a
      1 ms queue time would read 150 ms at P50);
    - in the +Inf bucket it is known only to be > lo, the last finite edge: `value` is None;
    - in any other bucket `value` is Prometheus' histogram_quantile, a linear interpolation
      within [lo, hi]: an estimate no finer than that bucket.
    """

    q: float
    lo: float  # the bucket's lower edge (0 for the first bucket)
    hi: float  # its upper edge (inf for the +Inf bucket)
    value: float | None  # interpolated within [lo, hi]; None where only a bound is known

    @property
    def below(self) -> float | None:
        """The quantile is < this (it fell in the first bucket), else None."""
        return self.hi if self.value is None and not math.isinf(self.hi) else None

    @property
    def above(self) -> float | None:
        """The quantile is > this (it fell in the +Inf bucket), else None."""
        return self.lo if self.value is None and math.isinf(self.hi) else None


def quantile_estimate(h: Histogram, q: float) -> QuantileEstimate | None:
    """The bucket the q-quantile falls in, and the value within it where one can be given (above).
    None when the histogram has no observations."""
    bounds = sorted(h.buckets)
    if not bounds or h.buckets[bounds[-1]] <= 0:
        return None
    rank = q * h.buckets[bounds[-1]]
    prev_le, prev_c = None, 0.0
    for le in bounds:
        c = h.buckets[le]
        if c >= rank and c > prev_c:
            if math.isinf(le):
                finite = prev_le if prev_le is not None else 0.0
                return QuantileEstimate(q, finite, le, None)
            if prev_le is None:  # the first bucket: only "< le" is known
                return QuantileEstimate(q, 0.0, le, None)
            return QuantileEstimate(q, prev_le, le, prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c))
        prev_le, prev_c = le, c
    return None


def quantile(h: Histogram, q: float) -> float | None:
    """The interpolated q-quantile, or None where the buckets give only a bound (quantile_estimate)."""
    est = quantile_estimate(h, q)
    return est.value if est is not None else None
