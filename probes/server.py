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

A fleet whose router does not aggregate metrics (ctx.replica_metrics: each replica's own page) is
read page by page and added up (probes/fleet_pages.py): the same fields, summed over the replicas
read, with replicas_read and per_engine keyed by the replica's index; a replica none of whose pages
could be read is the probe's shortfall, said once in run.json (docs/probes.md).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from probes.base import Probe, ProbeUnavailable
from probes.fleet_pages import ReplicaPages, fleet_snapshot
from probes.prom import QUANTILES, QuantileEstimate, Snapshot, histogram_delta, parse_metrics, quantile_estimate

COUNTERS = ("prompt_tokens", "generation_tokens", "preemptions")
GAUGES = ("kv_usage", "running", "waiting", "preemptions_total", "retracted")  # recorded as read


class ServerProbe(Probe):
    name = "server"

    def __init__(self, ctx, timeout_s: float = 2.0):
        super().__init__(ctx)
        self.url = (ctx.target_url or "").rstrip("/") + "/metrics"
        # A fleet's own pages, one per replica, instead of the target's one page.
        self.fleet = ReplicaPages(ctx.replica_metrics) if ctx.replica_metrics else None
        if self.fleet is not None:
            self.url = f"the {len(self.fleet.urls)} replicas' /metrics pages ({', '.join(self.fleet.urls)})"
        self.timeout_s = timeout_s
        self._prev: Snapshot | None = None
        self._prev_t = 0.0
        self._warned: set[str] = set()
        self.pages = 0  # scrapes that gave a page with known metric names
        self.first_error: str | None = None  # why the first failed scrape failed

    def check(self) -> None:
        if not self.ctx.target_url and self.fleet is None:
            raise ProbeUnavailable("no target URL to scrape (give --target)")
        # An unreachable target is not "cannot run": it may come up later, and its absence is evidence.

    def fetch(self, url: str | None = None) -> str:
        with urllib.request.urlopen(url or self.url, timeout=self.timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")

    def sample(self) -> dict | None:
        if self.fleet is not None:
            return self._fleet_row(self.fleet)
        t0 = time.time()
        try:
            text = self.fetch()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = _unreachable(exc)
            self._failed(why)
            return {"t": t0, "up": 0, "error": f"cannot scrape {self.url}: {why}"}
        return self.row_from_text(text, t0, time.time() - t0)

    def _fleet_row(self, fleet: ReplicaPages) -> dict:
        """One scrape of every replica's page, as one row over the replicas read."""
        t0 = time.time()
        fresh: list[Snapshot | None] = []
        errors: dict[int, str] = {}
        for i, url in enumerate(fleet.urls):
            try:
                snap = parse_metrics(self.fetch(url))
                if not snap.values and not snap.histograms:
                    raise ValueError(f"no refengine/vLLM/SGLang/TGI metric names among {snap.metric_count} samples")
            except (urllib.error.URLError, OSError, ValueError) as exc:
                snap, errors[i] = None, _unreachable(exc)
            fresh.append(snap)
        scrape_s = time.time() - t0
        cur, prev = fleet.scraped(fresh, errors)
        said = "; ".join(f"replica {i} ({fleet.urls[i]}): {why}" for i, why in errors.items())
        read = {str(i): snap for i, snap in enumerate(fresh) if snap is not None}
        if not read:
            self._failed(said)
            return {"t": t0, "up": 0, "error": f"cannot scrape any replica: {said}"}
        self.pages += 1
        now = fleet_snapshot(read, per_engine=len(fleet.urls) > 1)
        row: dict = {"t": t0, "up": 1, "engine": now.engine, "scrape_s": round(scrape_s, 4), "replicas_read": len(read)}
        if errors:
            row["error"] = f"cannot scrape {said}"
        row.update(self._measures(now, cur, prev, t0))
        self._prev_t = t0
        return row

    def shortfall(self) -> str | None:
        """A fleet's replicas none of whose pages could be read while the others' were: the sums
        leave them out (all of them unread is failure())."""
        if self.fleet is None or not self.pages:
            return None
        return "; ".join(self.fleet.never_read()) or None

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
        row.update(self._measures(snap, snap, self._prev, t))
        self._prev, self._prev_t = snap, t
        return row

    def _measures(self, now: Snapshot, cur: Snapshot, prev: Snapshot | None, t: float) -> dict:
        """The gauges of `now`; the counters' and histograms' change from `prev` to `cur` (one page:
        the same page; a fleet: the replicas read at both scrapes) over the interval since the last row."""
        row: dict = {key: now.values[key] for key in GAUGES if key in now.values}
        dt = t - self._prev_t
        if prev is not None and dt > 0:
            row.update(_counter_deltas(cur.values, prev, dt))
        row["prefix_cache_hit_rate"] = self._hit_rate(cur.values if prev is not None else now.values, prev)
        if now.per_engine:  # a data-parallel server or a fleet's pages: each engine's queue and KV cache
            row["per_engine"] = now.per_engine
        if prev is not None:  # the first scrape holds the whole history, not an interval
            row.update(_histogram_fields(cur, prev))
        return row

    @staticmethod
    def _hit_rate(v: dict, prev: Snapshot | None) -> float | None:
        q, h = v.get("prefix_cache_queries_total"), v.get("prefix_cache_hits_total")
        if q is not None and h is not None and prev is not None:
            dq = q - prev.values.get("prefix_cache_queries_total", q)
            dh = h - prev.values.get("prefix_cache_hits_total", h)
            return round(dh / dq, 4) if dq > 0 else None
        return v.get("prefix_cache_hit_rate_gauge")


def _unreachable(exc: Exception) -> str:
    """Why a page could not be fetched. An HTTP error says its status ("HTTP Error 404: Not Found");
    its .reason alone would not."""
    return str(exc) if isinstance(exc, urllib.error.HTTPError) else str(getattr(exc, "reason", exc))


def _counter_deltas(v: dict, prev: Snapshot, dt: float) -> dict:
    """Each counter's increase since the previous scrape, and the token counters' rates."""
    out: dict = {}
    for name in COUNTERS:
        cur_v, old_v = v.get(f"{name}_total"), prev.values.get(f"{name}_total")
        if cur_v is None or old_v is None:
            continue
        d = cur_v - old_v if cur_v >= old_v else cur_v  # counter reset
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
