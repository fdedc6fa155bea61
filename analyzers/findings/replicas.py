"""A fleet's replicas as findings of the run (analyzers/stats/replicas.py measures them per level):
requests spread unevenly over the replicas, and one replica that is the level's tail."""

from __future__ import annotations

# A fleet's replicas (analyzers/stats/replicas.py): a share of the requests this far from even is
# a routing imbalance; a replica whose TTFT P99 is this many times the fastest one's, both with this
# many ok requests, is where the level's tail comes from.
REPLICA_SHARE_SLACK = 0.15
REPLICA_TAIL_RATIO = 2.0
REPLICA_MIN_OK = 20


def replica_findings(shares, add) -> None:
    by_level: dict[str, list] = {}
    for r in shares:
        by_level.setdefault(r.level_id, []).append(r)
    for level_id, rs in by_level.items():
        if len(rs) < 2:
            continue
        even = 1 / len(rs)
        off = max(rs, key=lambda r: abs(r.request_share - even))
        if abs(off.request_share - even) > REPLICA_SHARE_SLACK:
            add(
                "replica_imbalance",
                "warning",
                "The fleet's requests were unevenly spread (a replica's share far "
                "from even: a router that avoids a slow replica, or one that does not balance)",
                level_id,
                f"replica {off.replica} {off.request_share:.0%}, even {even:.0%}",
            )
        judged = [r for r in rs if r.ok >= REPLICA_MIN_OK and r.ttft_p99_s]
        if len(judged) >= 2:
            slow = max(judged, key=lambda r: r.ttft_p99_s)
            fast = min(judged, key=lambda r: r.ttft_p99_s)
            if slow.ttft_p99_s >= REPLICA_TAIL_RATIO * fast.ttft_p99_s:
                add(
                    "replica_tail",
                    "warning",
                    f"One replica is the tail (its TTFT P99 at least "
                    f"{REPLICA_TAIL_RATIO:g}x the fastest replica's: look at that replica, not the fleet)",
                    level_id,
                    f"replica {slow.replica} {slow.ttft_p99_s * 1000:.0f} ms, replica {fast.replica} "
                    f"{fast.ttft_p99_s * 1000:.0f} ms",
                )
