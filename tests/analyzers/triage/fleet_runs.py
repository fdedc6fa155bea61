"""Synthetic runs of a fleet: a closed loop of users over replicas behind a router, each replica a
small queueing model, so that every record's latency follows from what its replica held when it
was sent (what analyzers/triage/fleet/ reconstructs). Written through the run-directory contract."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from planted import T0, write_run

from rundir import RequestRecord, RunDir

PROMPT, OUT, LONG_OUT = 256, 32, 400
TTFT_S, PER_REQUEST, TPOT_S = 0.050, 0.25, 0.004  # TTFT at an idle replica, +25% per request in flight
STALL_FACTOR = 4.0


@dataclass
class Replica:
    slots: int = 1_000  # requests it runs at once (its KV cache); the rest wait for a slot
    speed: float = 1.0  # a slower build: every step this many times slower
    # A neighbour on its cores now and then: this share of its requests' TTFTs STALL_FACTOR times longer
    # (its median request barely slower, its tail on it).
    stall_share: float = 0.0

    def latency(
        self, ends_in_flight: list[float], t: float, n_out: int, noise: float, decode_noise: float = 1.0
    ) -> tuple[float, float]:
        """(TTFT, E2E) of a request sent at t to this replica with these requests in flight."""
        n = len(ends_in_flight)
        wait = 0.0
        if n >= self.slots:  # the (n - slots + 1)-th earliest end frees its slot
            wait = sorted(ends_in_flight)[n - self.slots] - t
        running = min(n, self.slots)
        ttft = wait + TTFT_S * self.speed * (1 + PER_REQUEST * running) * noise
        return ttft, ttft + n_out * TPOT_S * self.speed * (1 + 0.05 * running) * decode_noise


def fleet_records(
    replicas: list[Replica],
    n: int = 1200,
    concurrency: int = 8,
    seed: int = 0,
    long_out: list[bool] | None = None,
    least_outstanding: bool = False,
    level: str = "c8",
    decode_jitter: float = 0.0,
) -> tuple[list[RequestRecord], list[dict]]:
    """`n` requests of a closed loop over the replicas (round robin, or to the fewest in flight), and
    the per-engine gauges a server probe would have read each second. `long_out[i]`: request i asks
    for LONG_OUT tokens instead of OUT. `decode_jitter`: the sigma of a lognormal factor on each request's
    decode time (a noisy host: E2E spread wide enough that few requests cannot tell a mean apart)."""
    rng = np.random.default_rng(seed)
    stall_rng = np.random.default_rng(seed + 1)
    users = [(T0 + 0.003 * u, u) for u in range(concurrency)]
    heapq.heapify(users)
    ends: list[list[float]] = [[] for _ in replicas]
    recs: list[RequestRecord] = []
    for i in range(n):
        t, u = heapq.heappop(users)
        for r in range(len(replicas)):
            ends[r] = [e for e in ends[r] if e > t]
        pick = int(np.argmin([len(e) for e in ends])) if least_outstanding else i % len(replicas)
        n_out = LONG_OUT if long_out is not None and long_out[i] else OUT
        noise = float(rng.lognormal(0.0, 0.08))
        decode_noise = float(rng.lognormal(0.0, decode_jitter)) if decode_jitter else 1.0
        ttft, e2e = replicas[pick].latency(ends[pick], t, n_out, noise, decode_noise)
        if replicas[pick].stall_share and stall_rng.random() < replicas[pick].stall_share:
            stall = ttft * (STALL_FACTOR - 1)  # (its own draws: the other replicas' sequences stay as they were)
            ttft, e2e = ttft + stall, e2e + stall
        ends[pick].append(t + e2e)
        recs.append(
            RequestRecord(
                level_id=level,
                concurrency=concurrency,
                request_rate=None,
                target_input_len=PROMPT,
                target_output_len=n_out,
                t_scheduled=t,
                t_sent=t,
                t_first_token=t + ttft,
                t_done=t + e2e,
                status="ok",
                in_window=True,
                prompt_tokens=PROMPT,
                completion_tokens=n_out,
                replica=str(pick),
            ).derive()
        )
        heapq.heappush(users, (t + e2e + 0.001, u))
    return recs, _gauges(recs, replicas)


def _gauges(recs: list[RequestRecord], replicas: list[Replica]) -> list[dict]:
    """One server-probe row a second with each replica's running, waiting and KV usage (a slot is a
    request's share of the KV cache), as a fleet's front exports them per engine label."""
    start, end = min(r.t_sent for r in recs), max(r.t_done for r in recs)
    rows = []
    for t in np.arange(start + 1.0, end + 1.0, 1.0):
        per_engine = {}
        for k, rep in enumerate(replicas):
            n = sum(1 for r in recs if r.replica == str(k) and r.t_sent <= t < r.t_done)
            running = min(n, rep.slots)
            per_engine[str(k)] = {
                "running": running,
                "waiting": n - running,
                "kv_usage": min(1.0, running / rep.slots),
            }
        rows.append(
            {
                "t": float(t),
                "up": 1,
                "running": sum(v["running"] for v in per_engine.values()),
                "waiting": sum(v["waiting"] for v in per_engine.values()),
                "kv_usage": max(v["kv_usage"] for v in per_engine.values()),
                "preemptions": 0,
                "preemptions_total": 0,
                "per_engine": per_engine,
            }
        )
    return rows


def fleet_run(
    path: Path, replicas: list[Replica], probes: bool = True, cpu_wait: dict[str, float] | None = None, **kw
) -> RunDir:
    """`cpu_wait`: each replica's own run-queue wait share, as the host probe reads a fleet driven URL by
    URL on its host (`per_replica`), one row a second."""
    recs, gauges = fleet_records(replicas, **kw)
    series = {"server": gauges} if probes else {}
    if cpu_wait is not None:
        series["host"] = [
            {"t": g["t"], "per_replica": {k: {"cpu_wait_share": v, "cpu_wait_cores": v} for k, v in cpu_wait.items()}}
            for g in gauges
        ]
    return write_run(path, recs, series or None, url="http://127.0.0.1:8000")
