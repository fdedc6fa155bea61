"""Prometheus metrics under vLLM's names, so one probe reads refengine and vLLM alike.

Counters that the engine already keeps (tokens, preemptions, prefix cache) are exported by a
collector that reads the loop's last stats snapshot at scrape time; per-request histograms are
observed when a request finishes, from its engine timestamps (vLLM's definitions: queue time =
first scheduled − arrival, prefill = first token − first scheduled, decode = finished − first token).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from refengine.outputs import RequestOutput

# Buckets close to vLLM's, so dashboards built for vLLM read ours the same way.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _EngineStatsCollector:
    """Reads EngineLoop.stats (a snapshot the loop thread replaces after each step)."""

    def __init__(self, engine_loop, model_name: str):
        self.engine_loop = engine_loop
        self.labels = {"model_name": model_name}

    def _gauge(self, name, doc, value):
        g = GaugeMetricFamily(name, doc, labels=list(self.labels))
        g.add_metric(list(self.labels.values()), value)
        return g

    def _counter(self, name, doc, value):
        c = CounterMetricFamily(name, doc, labels=list(self.labels))
        c.add_metric(list(self.labels.values()), value)
        return c

    def collect(self):
        s = self.engine_loop.stats
        yield self._gauge("vllm:num_requests_running", "Requests in the running batch.", s.num_running)
        # Admitted and not running: also those the engine thread has not taken in yet (a step runs),
        # so the gauge agrees with the queue time they are accruing.
        waiting = max(s.num_waiting, self.engine_loop.num_waiting_admitted)
        yield self._gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", waiting)
        yield self._gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", s.kv_usage)
        yield self._counter("vllm:num_preemptions", "Preemptions by recompute.", s.num_preemptions_total)
        yield self._counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries
        )
        yield self._counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_cache_hits)
        yield self._counter(
            "vllm:prompt_tokens", "Prompt tokens of requests that started generating.", s.prompt_tokens_total
        )
        yield self._counter("vllm:generation_tokens", "Generated tokens.", s.generation_tokens_total)
        yield self._gauge(
            "refengine:healthy", "1 while the engine loop runs.", 1.0 if self.engine_loop.healthy else 0.0
        )
        if getattr(s, "moe_expert_tokens", ()):  # MoE models: per-expert load, so imbalance is visible
            c = CounterMetricFamily(
                "refengine:moe_expert_tokens",
                "Token assignments routed to each expert (summed over layers).",
                labels=[*self.labels, "expert"],
            )
            for expert, n in enumerate(s.moe_expert_tokens):
                c.add_metric([*self.labels.values(), str(expert)], n)
            yield c
            yield self._counter(
                "refengine:moe_capacity_overflow",
                "Assignments dropped by the MoE capacity factor.",
                s.moe_overflow_total,
            )


class ServerMetrics:
    def __init__(self, engine_loop, model_name: str, block_size: int, num_blocks: int):
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name"]
        reg = self.registry
        reg.register(_EngineStatsCollector(engine_loop, model_name))
        info = Gauge(
            "vllm:cache_config_info",
            "KV cache configuration.",
            ["model_name", "block_size", "num_gpu_blocks"],
            registry=reg,
        )
        info.labels(model_name, str(block_size), str(num_blocks)).set(1)
        self._quantization_info(
            getattr(getattr(engine_loop, "engine", None), "quant", None),
            getattr(getattr(engine_loop, "engine", None), "quant_memory", None),
        )
        self.request_success = Counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            ["model_name", "finished_reason"],
            registry=reg,
        )
        self.requests_rejected = Counter(
            "refengine:requests_rejected",
            "Requests refused before reaching the engine (4xx/503), by reason.",
            ["model_name", "reason"],
            registry=reg,
        )
        self.step_failures = Counter(
            "refengine:engine_step_failures",
            "Engine steps that raised; their failed "
            "requests finished with an error, the loop went on. attributed=true: the "
            "step named its culprit, false: all of its requests failed.",
            ["model_name", "attributed"],
            registry=reg,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token (arrival → first token).",
            labels,
            buckets=TTFT_BUCKETS,
            registry=reg,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between consecutive token outputs.",
            labels,
            buckets=ITL_BUCKETS,
            registry=reg,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Arrival → finish.", labels, buckets=REQUEST_BUCKETS, registry=reg
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Arrival → first scheduled.",
            labels,
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.prefill = Histogram(
            "vllm:request_prefill_time_seconds",
            "First scheduled → first token.",
            labels,
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.decode = Histogram(
            "vllm:request_decode_time_seconds", "First token → finish.", labels, buckets=REQUEST_BUCKETS, registry=reg
        )
        self._last_token_time: dict[str, float] = {}

    def _quantization_info(self, quant, memory) -> None:
        """The precision policy in force (refengine/quant/policy.py) and the bytes it saves."""
        if quant is None:
            return
        d = quant.policy.as_dict()
        labels = ["model_name", "quantization", "weight_scales", "kv_cache_dtype", "skip", "fp8_modules"]
        g = Gauge(
            "refengine:quantization_info",
            "FP8 precision policy in force (1 = this policy).",
            labels,
            registry=self.registry,
        )
        g.labels(
            self.model_name,
            d["quantization"],
            str(d["weight_scales"] or ""),
            d["kv_cache_dtype"],
            ",".join(d["skip"]),
            ",".join(d["fp8_modules"]),
        ).set(1)
        if memory is not None:
            b = Gauge(
                "refengine:model_memory_bytes",
                "Bytes of weights and KV per token, as stored and as they would be unquantized.",
                ["model_name", "what"],
                registry=self.registry,
            )
            for what, value in (
                ("weights", memory.weight_bytes),
                ("weights_unquantized", memory.weight_bytes_unquantized),
                ("kv_per_token", memory.kv_bytes_per_token),
                ("kv_per_token_unquantized", memory.kv_bytes_per_token_unquantized),
            ):
                b.labels(self.model_name, what).set(value)

    def on_output(self, out: RequestOutput) -> None:
        """Called on the engine thread for each step's output of each request."""
        now = time.monotonic()
        if out.new_token_ids:
            last = self._last_token_time.get(out.request_id)
            if last is not None:
                self.itl.labels(self.model_name).observe(now - last)
            else:
                self._first_token(out)
            self._last_token_time[out.request_id] = now
        if out.finished:
            self._last_token_time.pop(out.request_id, None)
            self.finished(out)

    def finished(self, out: RequestOutput) -> None:
        reason = out.outputs[0].finish_reason or "abort"
        self.request_success.labels(self.model_name, reason).inc()
        ts = out.timestamps
        if ts is None:
            return
        m = self.model_name
        end = ts.finished if ts.finished is not None else time.monotonic()
        self.e2e.labels(m).observe(end - ts.arrival)
        if ts.first_token is not None:
            self.decode.labels(m).observe(end - ts.first_token)

    def _first_token(self, out: RequestOutput) -> None:
        """TTFT, queue and prefill time, observed when the first token is out (vLLM observes TTFT
        then too), so a scrape sees them while the request still streams, and a request that is
        cut off or aborted later is still counted in them."""
        ts, m = out.timestamps, self.model_name
        if ts is None or ts.first_token is None:
            return
        self.ttft.labels(m).observe(ts.first_token - ts.arrival)
        if ts.first_scheduled is not None:
            self.queue.labels(m).observe(ts.first_scheduled - ts.arrival)
            self.prefill.labels(m).observe(ts.first_token - ts.first_scheduled)

    def aborted(self, request_id: str) -> None:
        self._last_token_time.pop(request_id, None)
        self.request_success.labels(self.model_name, "abort").inc()

    def failed(self, request_id: str) -> None:
        """A request that failed inside the engine: finished_reason="error"."""
        self._last_token_time.pop(request_id, None)
        self.request_success.labels(self.model_name, "error").inc()

    def step_failed(self, attributed: bool) -> None:
        self.step_failures.labels(self.model_name, "true" if attributed else "false").inc()

    def rejected(self, reason: str) -> None:
        self.requests_rejected.labels(self.model_name, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
