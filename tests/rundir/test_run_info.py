"""run.json's target record (rundir/run_info.py): who balanced a fleet and which pages the server
probe read are kept; a run recorded before those fields still reads; what cannot be is refused."""

from __future__ import annotations

import pytest

from rundir import TargetInfo
from rundir.record_json import record_from_dict, record_to_dict

DIRECT = dict(url="http://a:8000", model="m", urls=["http://a:8000", "http://b:8000"], replicas=2)


def test_the_policy_and_the_replicas_pages_round_trip():
    t = TargetInfo(
        **DIRECT, lb_policy="least-outstanding", replica_metrics=["http://a:8000/metrics", "http://b:8000/metrics"]
    )
    back = record_from_dict(TargetInfo, record_to_dict(t))
    assert back.lb_policy == "least-outstanding" and back.replica_metrics == t.replica_metrics


def test_a_run_recorded_before_the_fields_reads_as_nobody_of_ours_balancing():
    old = record_from_dict(TargetInfo, {"url": "http://a:8000", "model": "m", "urls": DIRECT["urls"], "replicas": 2})
    assert old.lb_policy is None and old.replica_metrics == [] and not old.extra


def test_a_policy_without_a_fleet_of_ours_or_pages_that_do_not_match_the_replicas_are_refused():
    with pytest.raises(ValueError, match="lb_policy"):
        TargetInfo(url="http://router:8000", model="m", replicas=4, lb_policy="round-robin")  # the router's own
    with pytest.raises(ValueError, match="a page per replica"):
        TargetInfo(**DIRECT, replica_metrics=["http://a:8000/metrics"])
    assert TargetInfo(url=None, model="tiny", kind="embedded", replicas=2, lb_policy="round-robin").lb_policy
