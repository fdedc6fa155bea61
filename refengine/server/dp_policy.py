"""Which replica serves the next request: the data-parallel front's load-balancing policies.

Pure bookkeeping over replica indices, no I/O, so the policies are tested without a server.
The front asks `pick()` with the replicas it may use now (alive and healthy), then calls
`started(i)` and, when the response has ended (streamed or not), `finished(i)`; the front then
names the replica in REPLICA_HEADER.

- `round-robin`: the next eligible replica after the one picked last.
- `least-outstanding`: the eligible replica with the fewest requests in flight through the
  front; ties go round-robin, so an idle fleet still spreads its first requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LB_POLICIES = ("round-robin", "least-outstanding")
DEFAULT_LB_POLICY = "round-robin"  # the front's, and what `llmdiag plan` sizes a fleet under by default
# The response header in which the front names the replica that served (its index, as the
# replica's `engine` metric label): clients attribute each request with it (llmbench --replica-header).
REPLICA_HEADER = "x-llmbench-replica"


@dataclass
class ReplicaLoad:
    """What the front counts per replica (its /metrics exports both)."""

    in_flight: int = 0  # requests routed to it whose response has not ended yet
    routed: int = 0  # requests routed to it since the front started

    def __post_init__(self) -> None:
        if self.in_flight < 0 or self.routed < 0:
            raise ValueError(f"replica load counts are never negative: {self}")


@dataclass
class LoadBalancer:
    size: int
    policy: str = DEFAULT_LB_POLICY
    loads: list[ReplicaLoad] = field(default_factory=list)
    _next: int = 0  # where round-robin (and the tie-break) starts looking

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a fleet has at least one replica, got {self.size}")
        if self.policy not in LB_POLICIES:
            raise ValueError(f"lb policy must be one of {', '.join(LB_POLICIES)}, got {self.policy!r}")
        if not self.loads:
            self.loads = [ReplicaLoad() for _ in range(self.size)]
        if len(self.loads) != self.size:
            raise ValueError(f"{len(self.loads)} load counters for {self.size} replicas")

    def pick(self, eligible: set[int] | frozenset[int]) -> int | None:
        """The replica for the next request among `eligible`; None when there is none."""
        order = [(self._next + k) % self.size for k in range(self.size)]
        candidates = [i for i in order if i in eligible]
        if not candidates:
            return None
        if self.policy == "least-outstanding":
            # min() keeps the first of equals: the round-robin order breaks ties.
            chosen = min(candidates, key=lambda i: self.loads[i].in_flight)
        else:
            chosen = candidates[0]
        self._next = (chosen + 1) % self.size
        return chosen

    def started(self, index: int) -> None:
        load = self.loads[index]
        load.in_flight += 1
        load.routed += 1

    def finished(self, index: int) -> None:
        load = self.loads[index]
        if load.in_flight == 0:
            raise ValueError(f"replica {index} finished a request it was not counted for")
        load.in_flight -= 1
