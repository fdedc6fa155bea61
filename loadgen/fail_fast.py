"""Fail fast: a level whose first requests all fail is not a measurement, and a sweep that keeps
firing at a server that refuses everything only fills a table with errors.

The rule (per level): the first FIRST_N finished requests all failed, or every request that
finished in the first WINDOW_S seconds of the level (at least MIN_FAILED of them) failed, or,
later, CONSECUTIVE_N requests in a row failed (a server that began refusing everything mid-level:
a quota, a crash behind a gateway). The server's own message of the commonest failure is kept.
"""

from __future__ import annotations

import time
from collections import Counter

from rundir import RequestRecord

FIRST_N = 20
WINDOW_S = 5.0
MIN_FAILED = 3
CONSECUTIVE_N = 50


class FailFast:
    def __init__(self, t_start: float | None = None, first_n: int = FIRST_N, window_s: float = WINDOW_S):
        self.t_start = time.time() if t_start is None else t_start
        self.first_n, self.window_s = first_n, window_s
        self.seen = self.failed = self.in_a_row = 0
        self.messages: Counter[str] = Counter()
        self.any_ok = False

    def add(self, rec: RequestRecord) -> None:
        if rec.status == "cancelled":
            return
        self.seen += 1
        if rec.status == "ok":
            self.any_ok = True
            self.in_a_row = 0
            self.messages.clear()
            return
        self.failed += 1
        self.in_a_row += 1
        http = f"HTTP {rec.http_status}: " if rec.http_status else ""
        self.messages[f"{http}{rec.error or rec.error_kind or 'unknown error'}"[:300]] += 1

    def reason(self, now: float | None = None) -> str | None:
        """Why the level should stop now, or None."""
        if self.in_a_row >= CONSECUTIVE_N:
            message, n = self.messages.most_common(1)[0]
            return f"the last {self.in_a_row} requests all failed ({n} of them the same way): {message}"
        if self.any_ok or self.failed == 0:
            return None
        now = time.time() if now is None else now
        early = now - self.t_start >= self.window_s and self.failed >= MIN_FAILED
        if self.seen >= self.first_n or early:
            message, n = self.messages.most_common(1)[0]
            return f"the first {self.failed} requests all failed ({n} of them the same way): {message}"
        return None
