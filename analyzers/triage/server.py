"""P99 checks of scheduling from the server's own metrics (probe `server`): preemption bursts with
the KV cache at its ceiling, requests queueing, and a running batch too large for TPOT."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.server_quantiles import weighted_mean, worst_quantile
from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.evidence import SampleSplit, lift
from analyzers.triage.exposure import differential_in_time, held_windows
from analyzers.triage.tail_windows import TailWindows
from rundir.table import RequestTable

MIN_PREEMPTIONS = 1
PREEMPT_LIFT = 3.0
KV_CEILING = 0.95
QUEUE_LIFT = 2.0  # mean waiting in the spikes at least this many times the calm's ...
MIN_WAITING = 1.0  # ... and at least one request waiting on average
BATCH_LIFT = 1.5  # running requests in TPOT spikes vs calm

PREEMPT_ID, PREEMPT_TITLE = "p99.sched.preemption", "no preemption storm"
PREEMPT_NEXT = (
    "KV ran out and running requests were evicted and recomputed: lower --max-num-seqs, "
    "shorten --max-model-len, or give the KV cache more memory (see `llmdiag oom`)"
)
QUEUE_ID, QUEUE_TITLE = "p99.sched.queueing", "requests do not queue"
BATCH_ID, BATCH_TITLE = "p99.sched.batch-size", "the running batch is not too large for TPOT"
NO_SERVER = "no server probe in this run (llmbench sweep --probes server)"
# Fields a row has only when its scrape read a page with known metric names.
_NOT_MEASURED = ("up", "scrape_s", "dt_s")


def server_absence(status: str | None, series: ProbeSeries | None) -> str | None:
    """Why the server probe gives no evidence although it was asked for, or None. run.json's probes
    says "failed: ..." for a probe none of whose scrapes read a page (probes/runner.py); a run
    recorded before that said "ok" over rows that are all {up: 0, error}, so the rows decide too."""
    status = str(status or "")
    if status.startswith("failed"):
        return "the server probe failed: " + status.removeprefix("failed").lstrip(": ")
    if status.startswith("unavailable"):
        return "the server probe could not run: " + status.removeprefix("unavailable").lstrip(": ")
    if series is None or not len(series):
        return None
    if any(np.isfinite(v).any() for k, v in series.numeric.items() if k not in _NOT_MEASURED):
        return None
    errors = series.text.get("error") or ["no known metric names"]
    return f"the server probe failed: none of its {len(series)} scrapes read a page ({errors[0]})"


def _why_unchecked(absent: str | None, what: str) -> str:
    return absent or f"{NO_SERVER} or no {what}"


def check_preemptions(
    server: SampleSplit | None, tails: TailWindows, absent: str | None = None, table: RequestTable | None = None
) -> CheckResult:
    """Preemptions as a condition in time first (the requests that lived through them against
    those that did not), then bursts in the spike windows against the calm."""
    if server is None or not server.has("preemptions"):
        return unchecked(PREEMPT_ID, "scheduling", PREEMPT_TITLE, _why_unchecked(absent, "preemption counter"))
    if table is not None:
        by_exposure = _preemptions_by_exposure(server, tails, table)
        if by_exposure is not None:
            return by_exposure
    n_spike, n_calm, r_spike, r_calm = server.rate("preemptions")
    kv_spike, kv_calm = server.mean("kv_usage")
    kv = server.values("kv_usage")
    kv_max = (
        float(np.nanmax(kv[server.spike])) if server.has("kv_usage") and np.isfinite(kv[server.spike]).any() else None
    )
    ratio = lift(r_spike, r_calm)
    evidence: dict[str, Any] = dict(
        preemptions_in_spikes=n_spike,
        preemptions_in_calm=n_calm,
        preemptions_per_s_spikes=r_spike,
        preemptions_per_s_calm=r_calm,
        kv_usage_mean_spikes=kv_spike,
        kv_usage_mean_calm=kv_calm,
        kv_usage_max_spikes=kv_max,
    )
    if n_spike < MIN_PREEMPTIONS or ratio < PREEMPT_LIFT:
        return passed(
            PREEMPT_ID,
            "scheduling",
            PREEMPT_TITLE,
            f"{n_spike:.0f} preemptions in the spikes vs {n_calm:.0f} in the calm",
            **evidence,
        )
    explains = server.windows_where(tails, np.nan_to_num(server.values("preemptions")) > 0)
    at_ceiling = kv_max is not None and kv_max >= KV_CEILING
    finding = Finding(
        PREEMPT_ID,
        "scheduling",
        "high" if at_ceiling or ratio >= 10 else "medium",
        f"{n_spike:.0f} preemptions in the spike windows ({r_spike:.2f}/s vs {r_calm:.2f}/s calm)"
        + (f" with the KV cache at {kv_max:.0%}" if kv_max is not None else ""),
        evidence,
        explains,
        len(tails.spikes),
        PREEMPT_NEXT,
    )
    return failed(finding, PREEMPT_TITLE, finding.title)


def _preemptions_by_exposure(server: SampleSplit, tails: TailWindows, table: RequestTable) -> CheckResult | None:
    preempted = np.nan_to_num(server.values("preemptions"))
    found = differential_in_time(table, tails.metric, held_windows(server.start, server.end, preempted > 0))
    if found is None or not found.diff.separates:
        return None
    diff = found.diff
    kv = server.values("kv_usage")[preempted > 0]
    kv_max = float(np.nanmax(kv)) if np.isfinite(kv).any() else None
    evidence = dict(
        **diff.evidence(),
        preemptions_when_held=float(preempted.sum()),
        preemption_seconds=round(found.seconds, 1),
        kv_usage_max_when_held=kv_max,
    )
    finding = Finding(
        PREEMPT_ID,
        "scheduling",
        "high" if (kv_max or 0) >= KV_CEILING or diff.attributable >= 0.6 else "medium",
        f"{preempted.sum():.0f} preemptions in {found.seconds:.0f} s"
        + (f" with the KV cache at {kv_max:.0%}" if kv_max is not None else "")
        + "; "
        + diff.words(tails.metric, f"the {found.seconds:.0f} s of preemptions"),
        evidence,
        found.windows,
        len(tails.spikes),
        PREEMPT_NEXT,
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, PREEMPT_TITLE, finding.title)


def check_queueing(server: SampleSplit | None, tails: TailWindows, absent: str | None = None) -> CheckResult:
    if server is None or not server.has("waiting"):
        return unchecked(QUEUE_ID, "scheduling", QUEUE_TITLE, _why_unchecked(absent, "waiting-requests gauge"))
    w_spike, w_calm = server.mean("waiting")
    evidence: dict[str, Any] = dict(waiting_mean_spikes=w_spike, waiting_mean_calm=w_calm, **_queue_time(server))
    if w_spike is None or w_spike < MIN_WAITING or lift(w_spike, w_calm) < QUEUE_LIFT:
        return passed(
            QUEUE_ID,
            "scheduling",
            QUEUE_TITLE,
            f"waiting requests: {w_spike or 0:.1f} in the spikes vs {_calm_words(w_calm)}",
            **evidence,
        )
    waiting = np.nan_to_num(server.values("waiting"))
    explains = server.windows_where(tails, waiting >= MIN_WAITING)
    finding = Finding(
        QUEUE_ID,
        "scheduling",
        "medium",
        f"requests queued in the spike windows: {w_spike:.1f} waiting on average vs {_calm_words(w_calm)}"
        + _queue_time_words(server),
        evidence,
        explains,
        len(tails.spikes),
        "the load went above what the server admits: lower the offered load or --max-num-seqs "
        "limits, or add replicas; the TTFT tail here is queueing, not compute",
    )
    return failed(finding, QUEUE_TITLE, finding.title)


def _calm_words(w_calm: float | None) -> str:
    """The calm's side of a gauge's contrast. Where every scrape interval overlapped a spike window
    there is no calm, and "0.0 in the calm" would be a comparison with nothing."""
    if w_calm is None:
        return "no calm to compare (every scrape interval overlapped a spike window)"
    return f"{w_calm:.1f} in the calm"


def _rows(server: SampleSplit, spike: bool) -> np.ndarray:
    """Indices into the series of the kept spike (or calm) rows."""
    return np.flatnonzero(server.keep)[server.spike if spike else ~server.spike]


def _queue_time(server: SampleSplit) -> dict[str, float]:
    """The server's queue time over the spike and the calm intervals: its mean (sum/count, exact)
    and the worst interval's P99, as a number or as the bound the buckets give (vLLM's first
    bucket ends at 0.3 s: below it only "< 300 ms" is known; analyzers/server_quantiles.py)."""
    out: dict[str, float] = {}
    for side, spike in (("spikes", True), ("calm", False)):
        rows = _rows(server, spike)
        mean = weighted_mean(server.series.numeric, "queue_time", rows)
        if mean is not None:
            out[f"queue_time_mean_{side}_s"] = mean
        p99 = worst_quantile(server.series.numeric, "queue_time_p99", rows)
        if p99 is not None:
            out |= p99.evidence(f"queue_time_p99_{side}")
    return out


def _ms(seconds: float) -> str:
    """Milliseconds to three figures, and whole ones from a second up (1810, not 1.81e+03)."""
    ms = seconds * 1000
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def _queue_time_words(server: SampleSplit) -> str:
    rows = _rows(server, True)
    mean = weighted_mean(server.series.numeric, "queue_time", rows)
    p99 = worst_quantile(server.series.numeric, "queue_time_p99", rows)
    if mean is None and p99 is None:
        return ""
    parts = ([f"mean {_ms(mean)} ms"] if mean is not None else []) + ([f"P99 {p99.words()}"] if p99 is not None else [])
    return "; the server's queue time in the spikes: " + ", ".join(parts)


def check_batch_size(server: SampleSplit | None, tails: TailWindows, absent: str | None = None) -> CheckResult:
    if tails.metric != "tpot":
        return unchecked(BATCH_ID, "scheduling", BATCH_TITLE, "applies to TPOT tails (llmdiag p99 --metric tpot)")
    if server is None or not server.has("running"):
        return unchecked(BATCH_ID, "scheduling", BATCH_TITLE, _why_unchecked(absent, "running-requests gauge"))
    r_spike, r_calm = server.mean("running")
    evidence: dict[str, Any] = dict(running_mean_spikes=r_spike, running_mean_calm=r_calm)
    if r_spike is None or lift(r_spike, r_calm) < BATCH_LIFT:
        return passed(
            BATCH_ID,
            "scheduling",
            BATCH_TITLE,
            f"running requests: {r_spike or 0:.1f} in the spikes vs {r_calm or 0:.1f} in the calm",
            **evidence,
        )
    running = np.nan_to_num(server.values("running"))
    explains = server.windows_where(tails, running >= (r_calm or 0) * BATCH_LIFT)
    finding = Finding(
        BATCH_ID,
        "scheduling",
        "medium",
        f"TPOT spikes come with larger batches: {r_spike:.1f} running vs {r_calm or 0:.1f} in the calm",
        evidence,
        explains,
        len(tails.spikes),
        "cap --max-num-seqs at the largest batch whose TPOT meets the SLO (read it off the sweep)",
    )
    return failed(finding, BATCH_TITLE, finding.title)
