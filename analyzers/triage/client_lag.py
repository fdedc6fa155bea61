"""P99 check: whether the client itself fell behind (then the tail is partly the measurement's own):
it sent requests late (send lag), or it read streams late, every chunk back to back
(analyzers/bursts.py, with the server probe's ITL as the reference when there is one, and the host
probe's client wait as the witness of whose lag it was).
"""

from __future__ import annotations

import numpy as np

from analyzers.bursts import MIN_BURSTS, MIN_CHUNKS, BurstReads, level_client_wait, level_server_itl, stream_verdicts
from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.tail_windows import TailWindows, Window, merge
from rundir.table import RequestTable

SEND_LAG_FLOOR_S = 0.010  # send lag under this is noise on any machine
SEND_LAG_SHARE = 0.10  # ... and above this share of the TTFT P50 distorts TTFT
LAG_ID, LAG_TITLE = "p99.client-lag", "the load generator kept its schedule"


def check_send_lag(
    table: RequestTable, ttft: TailWindows, server: ProbeSeries | None = None, host: ProbeSeries | None = None
) -> CheckResult:
    """The client kept its schedule: it read its streams as they came (no level INVALID for burst
    reads), and it sent its requests on time (send lag)."""
    burst = _check_burst_reads(table, ttft, server, host)
    if burst.status == "failed":
        return burst
    lag = _check_lag(table, ttft)
    if lag.status == "passed":
        lag.detail += "; " + burst.detail
        lag.numbers.update(burst.numbers)
    return lag


def _check_burst_reads(
    table: RequestTable, ttft: TailWindows, server: ProbeSeries | None, host: ProbeSeries | None
) -> CheckResult:
    """Levels where enough streams arrived in one burst (analyzers/bursts.py) were not measured, unless
    the load generator had a CPU whenever it wanted one (the server sent them so)."""
    judged = bursts = 0
    failing: list[str] = []
    sent_so: list[str] = []
    burst_rows = [np.zeros(0, dtype=int)]
    df = table.df
    for level_id, rows in table.level_rows().items():
        itl = level_server_itl(server, table, rows)
        ok, v = stream_verdicts(table, rows, itl)
        waited = level_client_wait(host, table, rows)
        reads = BurstReads.of(v, itl, waited)
        judged, bursts = judged + reads.judged, bursts + reads.bursts
        if reads.fails:
            failing.append(f"{level_id} ({reads.bursts} of {reads.judged})")
            burst_rows.append(ok[v == 1])
        elif reads.sent_so and reads.bursts >= MIN_BURSTS:
            sent_so.append(f"{level_id} ({reads.bursts} of {reads.judged}, the client waiting {waited:.0%})")
    if not failing:
        why = (
            f"{bursts} of {judged} streams arrived in one burst"
            if judged
            else f"no stream had {MIN_CHUNKS} chunks or more: whether the client read them late cannot be judged"
        )
        if sent_so:
            why += (
                f"; in {', '.join(sent_so)} the load generator had a CPU when it wanted one: the server sent "
                "them in bursts (its HTTP side held tokens its engine had made), and they are what a user gets"
            )
        return passed(LAG_ID, "client", LAG_TITLE, why, burst_streams=bursts, burst_judged=judged)
    rows = np.concatenate(burst_rows)
    # The tail these streams make is their own latency windows: a level of bursts is slow throughout
    # (its TTFT holds the client's wait), with or without spike windows.
    sent, done = df["t_sent"].to_numpy(float)[rows], df["t_done"].to_numpy(float)[rows]
    explains = merge([Window(s, e) for s, e in zip(sent, done) if np.isfinite(e)])
    evidence = dict(burst_streams=int(rows.size), burst_judged=judged, levels=failing)
    finding = Finding(
        LAG_ID,
        "client",
        "high",
        f"the client fell behind the server: streams arrived in one burst in {', '.join(failing)}; "
        "their TTFT/TPOT are the client's own lag, not measured",
        evidence,
        explains,
        len(explains),
        "pin the server and the client to separate cores (taskset), or run the client on another "
        "machine, and re-run before trusting any latency",
    )
    return failed(finding, LAG_TITLE, finding.title)


def _check_lag(table: RequestTable, ttft: TailWindows) -> CheckResult:
    df = table.df
    measured = df["in_window"].to_numpy() & df["send_lag_s"].notna().to_numpy()
    if not measured.any():
        return unchecked(LAG_ID, "client", LAG_TITLE, "no measured requests")
    lag = df["send_lag_s"].to_numpy(float)
    p99 = float(np.percentile(lag[measured], 99))
    ttft_ok = df["ttft_s"].to_numpy(float)[(df["status"] == "ok").to_numpy() & measured]
    ttft_p50 = float(np.nanmedian(ttft_ok)) if ttft_ok.size else 0.0
    limit = max(SEND_LAG_FLOOR_S, SEND_LAG_SHARE * ttft_p50)
    if p99 <= limit:
        return passed(
            LAG_ID,
            "client",
            LAG_TITLE,
            f"send lag P99 {1e3 * p99:.1f} ms (limit {1e3 * limit:.1f} ms)",
            send_lag_p99_s=p99,
        )
    spikes = ttft.spike_rows
    late = spikes[lag[spikes] > limit] if spikes.size else spikes
    t_sent, t_sched = df["t_sent"].to_numpy(float), df["t_scheduled"].to_numpy(float)
    explains = ttft.windows_hit(t_sched[late], t_sent[late]) if late.size else []
    evidence = dict(
        send_lag_p99_s=p99, limit_s=limit, ttft_p50_s=ttft_p50, spikes_sent_late=int(late.size), spikes=int(spikes.size)
    )
    finding = Finding(
        LAG_ID,
        "client",
        "high" if late.size else "medium",
        f"the client sent requests late (send lag P99 {1e3 * p99:.0f} ms): part of the measured "
        "tail is the load generator's own",
        evidence,
        explains,
        len(ttft.spikes),
        "add load-generator workers (--workers N, or remote workers) and re-run before trusting the P99",
    )
    return failed(finding, LAG_TITLE, finding.title)
