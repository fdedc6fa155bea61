"""Sizing a level: when its warm-up and its measured window end (docs/metrics.md, "Sizing a level").

The coordinator owns one LevelSizer per level. Every records message of every worker carries,
next to the records that finished, two counters taken at the same instant: `warm_users` (this
worker's users that have finished at least one request) and `window_in_flight` (its requests
sent inside the window and not finished yet). From those and the records:

- steady state: every user of the level has finished a request. The window then starts, at least
  warmup_s after the start and ANNOUNCE_LEAD_S ahead of now;
- enough samples: the window holds sample_target requests that finished ok or are still in
  flight (those drain under load, as every in-window request does). The window then ends, at
  least duration_s after its start and ANNOUNCE_LEAD_S ahead of now. Counting the ones in flight
  ends the window as soon as it has sent what it needs, not one request latency later; a request
  that fails afterwards leaves the level short of its target, and its words say so.

Each decision moves the Plan once (loadgen.plan); the coordinator broadcasts the moved plan. A
moved time lies ahead of every request already sent, so no window flag set at send time changes.
"""

from __future__ import annotations

from loadgen.plan import Plan
from loadgen.specs import LevelSpec

# A decided time lies this far ahead of the decision, so every worker has the moved plan before
# the moment comes (locust's messages take well under a millisecond on loopback; a LAN's a few).
ANNOUNCE_LEAD_S = 0.5


class LevelSizer:
    def __init__(self, level: LevelSpec, user_count: int):
        self.level, self.user_count = level, user_count
        self.warm_users: dict[str, int] = {}
        self.window_in_flight: dict[str, int] = {}
        self.window_ok = 0  # in-window records that finished ok

    @property
    def active(self) -> bool:
        return self.level.steady_warmup or self.level.sample_target is not None

    def add(self, worker_id: str, message: dict) -> None:
        """One MSG_RECORDS payload: its counters and its records (dicts of RequestRecord)."""
        self.warm_users[worker_id] = int(message.get("warm_users", 0))
        self.window_in_flight[worker_id] = int(message.get("window_in_flight", 0))
        self.window_ok += sum(1 for r in message["records"] if r["in_window"] and r["status"] == "ok")

    def held(self) -> int:
        """Requests the window holds now: finished ok, or still in flight."""
        return self.window_ok + sum(self.window_in_flight.values())

    def decide(self, plan: Plan, now: float) -> Plan | None:
        """The plan moved by what is known at `now`, or None when nothing changes."""
        level = self.level
        if (
            level.steady_warmup
            and plan.warmup_end == "max"
            and now + ANNOUNCE_LEAD_S < plan.window_start
            and sum(self.warm_users.values()) >= self.user_count
        ):
            return plan.window_starting(max(now + ANNOUNCE_LEAD_S, plan.t_start + level.warmup_s), level)
        if (
            level.sample_target is not None
            and plan.window_end_by == "max"
            and plan.window_start <= now
            and now + ANNOUNCE_LEAD_S < plan.window_end
            and self.held() >= level.sample_target
        ):
            return plan.window_ending(max(now + ANNOUNCE_LEAD_S, plan.window_start + level.duration_s), level)
        return None
