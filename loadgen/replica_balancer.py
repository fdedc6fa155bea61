"""Which replica the client sends its next request to, when it drives several directly
(`llmbench sweep --target URL1,URL2 --lb-policy ...`): the client side of load balancing.

Pure bookkeeping over replica indices, no I/O, so the policies are tested without a server. One
balancer per locust process: its greenlets share it (gevent runs one at a time, so the counts need
no lock); with several worker processes each balances its own share of the level, blind to the
others' requests in flight (docs/cli.md).

- `round-robin`: the process's k-th request goes to replica (worker_index + n_workers * k) mod N,
  interleaved with the other workers' as the workload's requests are, so the fleet as a whole
  receives the requests in turn.
- `least-outstanding`: the replica with the fewest of this process's requests in flight; ties go
  round-robin from the replica after the one picked last (each worker starting at its own index),
  so an idle fleet still spreads its first requests.

The bundled fleet's front balances with the same names (refengine/server/dp_policy.py, which
imports nothing of ours); tests/loadgen/test_replica_balancer.py holds the two lists equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLIENT_LB_POLICIES = ("round-robin", "least-outstanding")


@dataclass
class ReplicaBalancer:
    size: int  # replicas driven directly
    policy: str = "round-robin"
    worker_index: int = 0  # this locust process among the level's workers
    n_workers: int = 1
    in_flight: list[int] = field(default_factory=list)  # this process's requests in flight, per replica
    _started: int = 0  # this process's requests so far (round-robin's count)
    _next: int = -1  # where least-outstanding's tie-break starts looking (-1: worker_index)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a fleet has at least one replica, got {self.size}")
        if self.policy not in CLIENT_LB_POLICIES:
            raise ValueError(f"lb policy must be one of {', '.join(CLIENT_LB_POLICIES)}, got {self.policy!r}")
        if not 0 <= self.worker_index < self.n_workers:
            raise ValueError(f"worker {self.worker_index} of {self.n_workers}")
        if not self.in_flight:
            self.in_flight = [0] * self.size
        if len(self.in_flight) != self.size or min(self.in_flight) < 0:
            raise ValueError(f"in-flight counts {self.in_flight} for {self.size} replicas")
        if self._next < 0:
            self._next = self.worker_index % self.size

    def pick(self) -> int:
        """The replica of the next request, counted in flight until `finished(index)`."""
        if self.policy == "least-outstanding":
            order = [(self._next + k) % self.size for k in range(self.size)]
            chosen = min(order, key=lambda i: self.in_flight[i])  # min() keeps the first of equals
            self._next = (chosen + 1) % self.size
        else:
            chosen = (self.worker_index + self.n_workers * self._started) % self.size
        self._started += 1
        self.in_flight[chosen] += 1
        return chosen

    def finished(self, index: int) -> None:
        """The request sent to `index` has ended (answered, failed, timed out or cut off)."""
        if self.in_flight[index] == 0:
            raise ValueError(f"replica {index} finished a request it was not counted for")
        self.in_flight[index] -= 1
