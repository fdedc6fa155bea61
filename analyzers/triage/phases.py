"""Where a level's latency went: queue, prefill and decode time, and the server's state meanwhile.

Two sources, each checking the other:
- the server's own histograms (probe `server`: vLLM v1's and refengine's
  `vllm:request_queue_time_seconds`, `..._prefill_time_seconds`, `..._decode_time_seconds`, as
  per-interval counts and means), summed over the intervals of the level's window;
- the per-request records: TTFT, E2E − TTFT (the decode phase), output lengths, inter-token gaps.

The part of TTFT that the server does not see (client TTFT minus server queue + prefill) is the
path between client and server: HTTP, tokenization, the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.server_quantiles import weighted_mean, worst_quantile
from analyzers.triage.tail_windows import Window
from rundir.table import RequestTable

STALL_GAP_FACTOR = 10.0  # an inter-token gap this many times the level's median is a stall


@dataclass
class LevelPhases:
    level_id: str
    n: int
    ttft_mean_s: float
    ttft_p99_s: float
    decode_mean_s: float  # E2E - TTFT, from the records
    e2e_mean_s: float
    tpot_mean_s: float | None
    out_tokens_mean: float
    in_tokens_mean: float
    itl_median_s: float | None
    stall_share: float | None  # share of inter-token gaps >= STALL_GAP_FACTOR x median
    server: dict[str, float | None] = field(default_factory=dict)  # server probe over the window
    host: dict = field(default_factory=dict)  # host probe over the window (top_others: the busiest others)

    @property
    def queue_s(self) -> float | None:
        return self.server.get("queue_time_mean_s")

    @property
    def prefill_s(self) -> float | None:
        return self.server.get("prefill_time_mean_s")

    def ttft_parts(self) -> dict[str, float]:
        """The client's mean TTFT split into queue / prefill / outside the server (client, HTTP,
        network), seconds. The server's histograms count the requests observed over the level's span,
        the records those sent in it: when the two populations differ by more than 2x, or the
        server saw no TTFT of its own, the server's queue:prefill ratio is applied to the client's
        TTFT and nothing is put outside. Without the histograms only the whole TTFT is known."""
        q, p = self.queue_s, self.prefill_s
        if q is None or p is None or q + p <= 0:
            return {"ttft (not split: no server histograms)": self.ttft_mean_s}
        t_server = self.server.get("ttft_mean_s")
        comparable = same_requests(self.server.get("ttft_count") or 0, self.n)
        outside = max(self.ttft_mean_s - t_server, 0.0) if comparable and t_server is not None else 0.0
        inside = self.ttft_mean_s - outside
        return {"queue": inside * q / (q + p), "prefill": inside * p / (q + p), "outside the server": outside}

    def e2e_parts(self) -> dict[str, float]:
        parts = self.ttft_parts()
        parts["decode"] = self.decode_mean_s
        return parts


def same_requests(n_server: float, n_client: int) -> bool:
    """Whether the server's histograms over a level's span and the client's records of it count
    about the same requests (within 2x): the server counts every request it observed in the span,
    the records those sent in the measured window, and only like populations' means subtract."""
    return n_client > 0 and 0.5 <= n_server / n_client <= 2.0


def _nanmean(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else 0.0


def _nanpct(v: np.ndarray, q: float) -> float:
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if v.size else 0.0


def window_rows(series: ProbeSeries | None, w: Window) -> np.ndarray | None:
    """The rows whose interval [t - dt, t] has its middle inside the window (a row describes the
    second before it, so a row just after the window starts is mostly the previous level's)."""
    if series is None or not len(series):
        return None
    gaps = np.diff(series.t)
    dt = series.numeric.get("dt_s")
    step = np.concatenate([[float(np.median(gaps)) if gaps.size else 1.0], gaps])
    if dt is not None:
        step = np.where(np.isfinite(dt), dt, step)
    mid = series.t - 0.5 * step
    keep = (mid >= w.start) & (mid <= w.end)
    return keep if keep.any() else None


def _finite(series: ProbeSeries, keep: np.ndarray, name: str) -> np.ndarray | None:
    """The field's finite values in the kept samples (None: the probe has no such field)."""
    v = series.numeric.get(name)
    if v is None:
        return None
    v = v[keep]
    return v[np.isfinite(v)]


def _mean(series: ProbeSeries, keep: np.ndarray, name: str) -> float | None:
    v = _finite(series, keep, name)
    return float(v.mean()) if v is not None and v.size else None


def _max(series: ProbeSeries, keep: np.ndarray, name: str) -> float | None:
    v = _finite(series, keep, name)
    return float(v.max()) if v is not None and v.size else None


def _sum(series: ProbeSeries, keep: np.ndarray, name: str) -> float | None:
    v = series.numeric.get(name)
    if v is None:
        return None
    v = v[keep]
    return float(np.nansum(v)) if np.isfinite(v).any() else None


def server_state(series: ProbeSeries | None, w: Window, observed: Window | None = None) -> dict[str, float | None]:
    keep = window_rows(series, w)
    if keep is None or series is None:  # (no rows without a series)
        return {}
    s = series
    fin = window_rows(series, observed) if observed is not None else keep
    fin = keep if fin is None else fin
    out = {
        f"{h}_mean_s": weighted_mean(s.numeric, h, fin) for h in ("queue_time", "prefill_time", "decode_time", "ttft")
    }
    # The worst interval's queue-time P99, as a number or as the bound its bucket gives (a P99 in
    # vLLM's first bucket is only "< 300 ms": analyzers/server_quantiles.py).
    p99 = worst_quantile(s.numeric, "queue_time_p99", fin)
    out.update(p99.evidence("queue_time_p99_max") if p99 is not None else {})
    out.update(
        ttft_count=_sum(s, fin, "ttft_count"),
        running_mean=_mean(s, keep, "running"),
        running_max=_max(s, keep, "running"),
        waiting_mean=_mean(s, keep, "waiting"),
        waiting_max=_max(s, keep, "waiting"),
        kv_usage_mean=_mean(s, keep, "kv_usage"),
        kv_usage_max=_max(s, keep, "kv_usage"),
        preemptions=_sum(s, keep, "preemptions"),
        retracted_max=_max(s, keep, "retracted"),
    )
    running, waiting = s.numeric.get("running"), s.numeric.get("waiting")
    if running is not None and waiting is not None:
        # The batch while requests waited: a level's first and last scrapes (ramp-up, drain) see
        # an empty queue, and would dilute "pinned at the cap" if averaged in.
        r, q = running[keep], waiting[keep]
        queued = np.isfinite(r) & np.isfinite(q) & (q >= 1)
        out["waiting_share"] = float(queued.mean()) if queued.size else None
        out["running_when_waiting"] = float(r[queued].mean()) if queued.any() else None
        out["running_max_when_waiting"] = float(r[queued].max()) if queued.any() else None
        # The batch as the steps left it: an empty batch beside a queue is the instant between a
        # step that finished the whole batch and the next one, which admits its successors.
        stepped = queued & (r >= 1)
        out["running_when_waiting_nonempty"] = float(r[stepped].mean()) if stepped.any() else None
        kv = s.numeric.get("kv_usage")
        if kv is not None:
            k = kv[keep]
            held = queued & np.isfinite(k) & (r >= 1)
            out["kv_usage_when_waiting"] = float(k[held].mean()) if held.any() else None
            # One running request's share of the cache: what the next one will need (unique prompts).
            out["kv_per_running_when_waiting"] = float((k[held] / r[held]).mean()) if held.any() else None
    if running is not None and out["running_max"]:
        r = running[keep]
        r = r[np.isfinite(r)]
        # Share of scrapes with the batch at its ceiling: a pinned batch is an admission limit.
        out["running_at_max_share"] = float((r >= out["running_max"] - 0.5).mean()) if r.size else None
    return out


def busiest_others(
    series: ProbeSeries, keep: np.ndarray, top_others: dict[float, list[dict]] | None, n: int = 3
) -> list[dict]:
    """The other processes that took the most CPU over the window: [{pid, comm, cpu_cores}] (means)."""
    acc: dict[int, list] = {}
    rows = int(keep.sum())
    for t in series.t[keep]:
        for p in (top_others or {}).get(float(t), []) or []:
            if isinstance(p, dict) and "pid" in p:
                e = acc.setdefault(int(p["pid"]), [str(p.get("comm", "?")), 0.0])
                e[1] += float(p.get("cpu_cores") or 0.0)
    ranked = sorted(acc.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"pid": pid, "comm": comm, "cpu_cores": round(c / rows, 2)} for pid, (comm, c) in ranked if rows]


def host_state(series: ProbeSeries | None, w: Window, top_others: dict[float, list[dict]] | None = None) -> dict:
    keep = window_rows(series, w)
    if keep is None or series is None:  # (no rows without a series)
        return {}
    s = series
    ncores = len([k for k in s.numeric if k.startswith("cpu_per_core_pct.")]) or None
    return dict(
        cores=ncores,
        top_others=busiest_others(s, keep, top_others),
        cpu_pct=_mean(s, keep, "cpu_pct"),
        server_cpu_cores=_mean(s, keep, "server_cpu_cores"),
        client_cpu_cores=_mean(s, keep, "client_cpu_cores"),
        others_cpu_cores=_mean(s, keep, "others_cpu_cores"),
        cpu_pressure_some_avg10=_mean(s, keep, "cpu_pressure_some_avg10"),
        cpu_pressure_some_share=_mean(s, keep, "cpu_pressure_some_share"),
        cpu_steal_pct=_mean(s, keep, "cpu_steal_pct"),
    )


def observed_window(table: RequestTable, rows: np.ndarray, w: Window) -> Window:
    """Where the server's histograms saw `rows`: from their first first token to their last finish
    (servers observe TTFT at the first token, vLLM and refengine queue and prefill time too, the rest
    when a request finishes), half a second wider each side; `w` when none of them got that far."""
    df = table.df
    done = df["t_done"].to_numpy(float)[rows]
    first = df["t_first_token"].to_numpy(float)[rows]
    starts = np.r_[first[np.isfinite(first)], done[np.isfinite(done)]]
    return Window(float(starts.min()) - 0.5, float(np.nanmax(done)) + 0.5) if starts.size else w


def level_phases(
    table: RequestTable,
    level_id: str,
    rows: np.ndarray,
    w: Window,
    server: ProbeSeries | None,
    host: ProbeSeries | None,
    top_others: dict[float, list[dict]] | None = None,
) -> LevelPhases:
    """`w` is the level's span (gauges, host); the server's histograms are read over the span from
    the level's first first token to its last finish: servers observe TTFT at the first token
    (vLLM, refengine: queue and prefill time too) and the rest when a request finishes."""
    df = table.df
    observed = observed_window(table, rows, w)
    ttft = df["ttft_s"].to_numpy(float)[rows]
    e2e = df["e2e_s"].to_numpy(float)[rows]
    if not np.isfinite(ttft).any():
        # No first token at all (the level's requests were cut off): how long they waited is the
        # TTFT's lower bound, and there was no decode.
        ttft = df["t_done"].to_numpy(float)[rows] - df["t_sent"].to_numpy(float)[rows]
        e2e = ttft
    tpot = df["tpot_s"].to_numpy(float)[rows]
    tpot = tpot[np.isfinite(tpot)]
    mask = np.zeros(len(df), dtype=bool)
    mask[rows] = True
    gaps = table.gaps_of(mask)
    med = float(np.median(gaps)) if gaps.size else None
    stalls = float((gaps >= STALL_GAP_FACTOR * med).mean()) if gaps.size and med else None
    return LevelPhases(
        level_id,
        int(rows.size),
        _nanmean(ttft),
        _nanpct(ttft, 99),
        _nanmean(e2e - ttft),
        _nanmean(e2e),
        float(tpot.mean()) if tpot.size else None,
        _nanmean(df["out_tokens"].to_numpy(float)[rows]),
        _nanmean(df["in_tokens"].to_numpy(float)[rows]),
        med,
        stalls,
        server_state(server, w, observed),
        host_state(host, w, top_others),
    )
