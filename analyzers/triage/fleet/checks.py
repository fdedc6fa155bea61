"""The fleet's checks for `llmdiag p99`, in order: failures on one replica, a hot replica, then the
routing (which defers to a hot replica), then the router's own time. A run whose records name fewer
than two replicas is a single server: the first three say "not a fleet" and could not be checked, as
a check without its data does; the router's needs no replica names (a foreign router sets no
header), only the replicas' pages behind the target (router.py)."""

from __future__ import annotations

from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import CheckResult, unchecked
from analyzers.triage.fleet.hot_replica import HOT_TITLE, check_hot_replica
from analyzers.triage.fleet.imbalance import IMBALANCE_ID, IMBALANCE_TITLE, check_imbalance, routing_words
from analyzers.triage.fleet.load_at_send import fleet_load
from analyzers.triage.fleet.own_witness import HOT_ID
from analyzers.triage.fleet.replica_failures import REPLICA_FAIL_ID, REPLICA_FAIL_TITLE, check_replica_failures
from analyzers.triage.fleet.router import check_router
from analyzers.triage.tail_windows import TailWindows
from rundir.run_info import TargetInfo
from rundir.table import RequestTable

NOT_A_FLEET = "not a fleet: the records name fewer than two replicas (one server)"


def check_fleet(
    table: RequestTable,
    tails: TailWindows,
    target: TargetInfo,
    server: ProbeSeries | None,
    tcp: ProbeSeries | None = None,
    host: ProbeSeries | None = None,
) -> list[CheckResult]:
    router = check_router(table, tails, target, server, tcp)
    load = fleet_load(table)
    if load is None:
        return [
            *(
                unchecked(i, "fleet", t, NOT_A_FLEET)
                for i, t in (
                    (REPLICA_FAIL_ID, REPLICA_FAIL_TITLE),
                    (HOT_ID, HOT_TITLE),
                    (IMBALANCE_ID, IMBALANCE_TITLE),
                )
            ),
            router,
        ]
    hot = check_hot_replica(table, tails, load, server, target.urls, host)
    hot_replica = hot.finding.evidence["replica"] if hot.finding is not None else None
    return [
        check_replica_failures(table, tails.metric, target.urls),
        hot,
        check_imbalance(table, tails, load, routing_words(target), hot_replica, server),
        router,
    ]
