"""reports/tables.py: a fleet driven directly shows each replica's URL beside its index, and the
run's target row says how the fleet was balanced."""

from __future__ import annotations

from synth_run import make_run, rec

from analyzers.summary import analyze_run
from reports.tables import config_rows, replica_label, replica_rows
from rundir import TargetInfo


def _direct_fleet(tmp_path):
    records = []
    for i in range(20):
        r = rec(i * 0.2, 0.1, 0.3, 11, level="c2", concurrency=2)
        r.replica = str(i % 2)
        records.append(r)
    run = make_run(tmp_path / "run", records, {"c2": (0, 10)})
    info = run.read_info()
    info.target = TargetInfo(
        url="http://a:8000",
        model="m",
        urls=["http://a:8000", "http://b:8000"],
        replicas=2,
        lb_policy="least-outstanding",
        replica_metrics=["http://a:8000/metrics", "http://b:8000/metrics"],
    )
    run.write_info(info)
    return run


def test_replicas_driven_directly_are_named_by_index_and_shown_with_their_url(tmp_path):
    s, _ = analyze_run(_direct_fleet(tmp_path))
    assert [row[1] for row in replica_rows(s)] == ["0 (http://a:8000)", "1 (http://b:8000)"]
    target = dict(config_rows(s.info))["target"]
    assert "http://a:8000, http://b:8000" in target and "2 replicas balanced least-outstanding" in target


def test_a_name_that_is_no_index_of_the_urls_stays_as_recorded():
    assert replica_label("http://a:8000", ["http://a:8000", "http://b:8000"]) == "http://a:8000"  # an older run
    assert replica_label("1", []) == "1"  # the embedded fleet's front names its index
