"""Counting a level's records as they stream in, and the rule that says the client fell behind."""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadgen.specs import LevelResult, LevelSpec
from rundir import RequestRecord

SEND_LAG_P99_LIMIT_S = 0.050  # open loop: later than this at P99 and the offered rate was not offered
CLIENT_CPU_LIMIT_PERCENT = 90.0  # a load-generator process this busy delays its own timestamps


class LevelTally:
    def __init__(self, level: LevelSpec):
        self.level = level
        self.finished = self.ok = self.in_window = self.in_window_ok = self.cancelled = 0
        self.errors_by_kind: Counter[str] = Counter()
        self.worker_ids: set[str] = set()
        self._lags: list[float] = []

    def add(self, rec: RequestRecord) -> None:
        self.finished += 1
        if rec.worker_id:
            self.worker_ids.add(rec.worker_id)
        if rec.status == "ok":
            self.ok += 1
        elif rec.status == "cancelled":
            self.cancelled += 1
        else:
            self.errors_by_kind[rec.error_kind or "unknown"] += 1
        if rec.in_window:
            self.in_window += 1
            self.in_window_ok += rec.status == "ok"
            self._lags.append(rec.send_lag_s)

    @property
    def errors(self) -> int:
        return sum(self.errors_by_kind.values())

    def result(self, worker_done: dict[str, dict], sent_reported: int | None) -> LevelResult:
        r = LevelResult(level_id=self.level.level_id)
        r.sent = self.finished
        r.in_window, r.in_window_ok, r.ok = self.in_window, self.in_window_ok, self.ok
        r.errors_by_kind = dict(self.errors_by_kind)
        r.timeouts = self.errors_by_kind.get("timeout", 0)
        r.cancelled = self.cancelled
        r.worker_ids = sorted(self.worker_ids | set(worker_done))
        if sent_reported is not None:
            r.records_missing = max(0, sent_reported - self.finished)
        if self._lags:
            lags = np.asarray(self._lags)
            r.send_lag_p50_s = float(np.percentile(lags, 50))
            r.send_lag_p99_s = float(np.percentile(lags, 99))
        cpu = {w: d["cpu_percent"] for w, d in worker_done.items() if d.get("cpu_percent") is not None}
        r.client_cpu_by_worker = cpu
        r.client_cpu_percent = max(cpu.values()) if cpu else None
        r.fell_behind_reasons = fell_behind_reasons(self.level, r.send_lag_p99_s, cpu)
        if self.level.open_loop:
            idle = sorted(w for w, d in worker_done.items() if d.get("pacers") == 0)
            r.fell_behind_reasons += [
                f"load generator {w} ran no pacer: its share of the rate was not offered" for w in idle
            ]
        r.fell_behind = bool(r.fell_behind_reasons)
        return r


def fell_behind_reasons(level: LevelSpec, send_lag_p99_s: float | None, cpu_by_worker: dict[str, float]) -> list[str]:
    """The client kept up unless: open loop with send lag P99 > 50 ms, or any load process > 90% CPU."""
    reasons = []
    if level.open_loop and send_lag_p99_s is not None and send_lag_p99_s > SEND_LAG_P99_LIMIT_S:
        reasons.append(
            f"send lag P99 {1000 * send_lag_p99_s:.1f} ms > {1000 * SEND_LAG_P99_LIMIT_S:.0f} ms: "
            f"requests left later than planned"
        )
    for worker, cpu in sorted(cpu_by_worker.items()):
        if cpu > CLIENT_CPU_LIMIT_PERCENT:
            reasons.append(
                f"load generator {worker} at {cpu:.0f}% CPU > {CLIENT_CPU_LIMIT_PERCENT:.0f}%: "
                f"add workers (LevelSpec.workers)"
            )
    return reasons
