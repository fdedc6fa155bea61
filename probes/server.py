"""`server` probe: scrape the target's Prometheus /metrics and record one engine-neutral row.

Row fields: up (1 scraped, 0 not), engine, scrape_s; kv_usage (0..1), running, waiting;
preemptions_total and preemptions (this interval); retracted (SGLang's gauge of requests retracted
in its latest batch); prefix_cache_hit_rate (this interval, from
hits/queries counters, or the engine's gauge); prompt_tokens, generation_tokens (this interval)
and prompt_tok_s, generation_tok_s; per histogram h in ttft, queue_time, itl, e2e: h_count (this
interval), h_mean_s (sum/count, exact) and per quantile p in p50, p90, p99: h_p_s, a linear
interpolation within its bucket, with h_p_bucket_s [lo, hi] -- or, when the quantile falls in the
first bucket (lower edge 0), h_p_s null and h_p_lt_s its upper edge (the quantile is below it), and
in the +Inf bucket h_p_s null and h_p_gt_s the last finite edge; also for prefill_time and
decode_time (vLLM v1's and refengine's request phases). A scrape that fails writes {up: 0, error}.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from probes.base import Probe, ProbeUnavailable
from probes.prom import QUANTILES, QuantileEstimate, Snapshot, histogram_delta, parse_metrics, quantile_estimate

COUNTERS = ("prompt_tokens", "generation_tokens", "preemptions")


class ServerProbe(Probe):
    name = "server"

    def __init__(self, ctx, timeout_s: float = 2.0):
        super().__init__(ctx)
        self.url = (ctx.target_url or "").rstrip("/") + "/metrics"
        self.timeout_s = timeout_s
        self._prev: Snapshot | None = None
        self._prev_t = 0.0
        self._warned: set[str] = set()
        self.pages = 0                        # scrapes that gave a page with known metric names
        self.first_error: str | None = None   # why the first failed scrape failed

    def check(self) -> None:
        if not self.ctx.target_url:
            raise ProbeUnavailable("no target URL to scrape (give --target)")
        # An unreachable target is not "cannot run": it may come up later, and its absence is evidence.

    def fetch(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")

    def sample(self) -> dict | None:
        t0 = time.time()
        try:
            text = self.fetch()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # An HTTP error says its status ("HTTP Error 404: Not Found"); its .reason alone would not.
            why = str(exc) if isinstance(exc, urllib.error.HTTPError) else str(getattr(exc, "reason", exc))
            self._failed(why)
            return {"t": t0, "up": 0, "error": f"cannot scrape {self.url}: {why}"}
        return self.row_from_text(text, t0, time.time() - t0)

    def _failed(self, why: str) -> None:
        if self.first_error is None:
            self.first_error = why

    def failure(self) -> str | None:
        """A probe none of whose scrapes gave a page it could read measured nothing (llama.cpp's
        server has no /metrics: every scrape 404s), whatever its rows say."""
        if self.pages or self.first_error is None:
            return None
        return f"every scrape of {self.url} failed ({self.first_error})"

    def row_from_text(self, text: str, t: float, scrape_s: float = 0.0) -> dict:
        try:
            snap = parse_metrics(text)
        except ValueError as exc:
            self._failed(str(exc))
            return {"t": t, "up": 1, "error": f"{self.url}: {exc}"}
        row: dict = {"t": t, "up": 1, "engine": snap.engine, "scrape_s": round(scrape_s, 4)}
        if not snap.values and not snap.histograms:
            why = f"no refengine/vLLM/SGLang/TGI metric names among {snap.metric_count} samples"
            self._failed(why)
            row["error"] = f"{self.url}: {why}"
        else:
            self.pages += 1
        v = snap.values
        row.update({key: v[key] for key in ("kv_usage", "running", "waiting", "preemptions_total", "retracted")
                    if key in v})
        prev, dt = self._prev, t - self._prev_t
        if prev is not None and dt > 0:
            row.update(_counter_deltas(v, prev, dt))
        row["prefix_cache_hit_rate"] = self._hit_rate(v, prev)
        if snap.per_engine:       # a data-parallel server: each engine's queue and KV cache
            row["per_engine"] = snap.per_engine
        if prev is not None:      # the first scrape holds the whole history, not an interval
            row.update(_histogram_fields(snap, prev))
        self._prev, self._prev_t = snap, t
        return row

    @staticmethod
    def _hit_rate(v: dict, prev: Snapshot | None) -> float | None:
        q, h = v.get("prefix_cache_queries_total"), v.get("prefix_cache_hits_total")
        if q is not None and h is not None and prev is not None:
            dq = q - prev.values.get("prefix_cache_queries_total", q)
            dh = h - prev.values.get("prefix_cache_hits_total", h)
            return round(dh / dq, 4) if dq > 0 else None
        return v.get("prefix_cache_hit_rate_gauge")


def _counter_deltas(v: dict, prev: Snapshot, dt: float) -> dict:
    """Each counter's increase since the previous scrape, and the token counters' rates."""
    out: dict = {}
    for name in COUNTERS:
        cur_v, old_v = v.get(f"{name}_total"), prev.values.get(f"{name}_total")
        if cur_v is None or old_v is None:
            continue
        d = cur_v - old_v if cur_v >= old_v else cur_v     # counter reset
        out[name] = d
        if name != "preemptions":
            out[f"{name.replace('_tokens', '')}_tok_s"] = round(d / dt, 3)
    return out


def _histogram_fields(snap: Snapshot, prev: Snapshot) -> dict:
    """Per histogram, what was observed since the previous scrape: count, mean and quantiles."""
    out: dict = {}
    for h_name, h in snap.histograms.items():
        d = histogram_delta(prev.histograms.get(h_name), h)
        out[f"{h_name}_count"] = d.count
        if d.count > 0:
            out[f"{h_name}_mean_s"] = round(d.sum / d.count, 6)
            for q in QUANTILES:
                out.update(_quantile_fields(f"{h_name}_p{int(q * 100)}", quantile_estimate(d, q)))
    return out


def _quantile_fields(key: str, est: QuantileEstimate | None) -> dict:
    """`{key}_s` is a number only where the bucket has two finite edges (then `{key}_bucket_s` is
    [lo, hi], what it was interpolated within); in the first bucket it is null and `{key}_lt_s` the
    edge it is below, in the +Inf bucket null and `{key}_gt_s` the last finite edge (docs/probes.md)."""
    if est is None:
        return {f"{key}_s": None}
    if est.below is not None:
        return {f"{key}_s": None, f"{key}_lt_s": est.below}
    if est.above is not None:
        return {f"{key}_s": None, f"{key}_gt_s": est.above}
    assert est.value is not None, "a quantile without a bound below or above has its value"
    return {f"{key}_s": round(est.value, 6), f"{key}_bucket_s": [est.lo, est.hi]}
