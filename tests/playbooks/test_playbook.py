"""Playbooks: both files parse into ordered, unique step ids; a run marks and prints every step."""

import io

import pytest
from rich.console import Console

from playbooks.playbook import CannotCheck, PlaybookError, PlaybookRun, Status, load_playbook, parse_playbook
from reports.playbook_table import print_playbook


def test_oom_playbook_follows_the_seed_order():
    pb = load_playbook("oom")
    ids = pb.ids
    assert ids[:2] == ["oom.weights", "oom.kv"]
    fixes = [i for i in ids if i.startswith("oom.fix.")]
    assert fixes == [
        "oom.fix.paged-kv",
        "oom.fix.max-model-len",
        "oom.fix.long-requests",
        "oom.fix.concurrency-cap",
        "oom.fix.quantize",
    ]
    assert pb.step("oom.ramp").automatic and not pb.step("oom.fix.quantize").automatic


def test_p99_playbook_is_the_fleet_then_network_then_scheduling_then_host():
    pb = load_playbook("p99")
    sections = []
    for s in pb.steps:
        if s.section not in sections:
            sections.append(s.section)
    assert [s.split(". ", 1)[1] for s in sections] == [
        "Where the tail is",
        "The fleet",
        "Network",
        "Scheduling",
        "Host",
    ]
    by_section = {sec: [s for s in pb.steps if s.section == sec] for sec in sections}
    for sec, prefix in zip(sections[1:], ("p99.fleet.", "p99.net.", "p99.sched.", "p99.host.")):
        assert all(s.id.startswith(prefix) for s in by_section[sec])
        assert any(s.automatic for s in by_section[sec]) and any(not s.automatic for s in by_section[sec])
    assert "p99.sched.preemption" in pb.ids and "p99.net.irq-affinity" in pb.ids


def test_a_run_marks_every_step_and_renders():
    pb = load_playbook("oom")
    run = PlaybookRun(pb)
    run.run(
        {
            "oom.weights": lambda: (True, "16 GiB"),
            "oom.kv": lambda: (False, "needs 90 GiB"),
            "oom.ramp": lambda: (_ for _ in ()).throw(CannotCheck("no --target")),
        }
    )
    results = {r.step.id: r for r in run.results()}
    assert results["oom.weights"].status is Status.PASSED
    assert results["oom.kv"].status is Status.FAILED and results["oom.kv"].evidence == "needs 90 GiB"
    assert results["oom.ramp"].status is Status.UNCHECKED and results["oom.ramp"].evidence == "no --target"
    assert results["oom.log"].status is Status.UNCHECKED and results["oom.log"].evidence == "no check ran"
    assert results["oom.fix.paged-kv"].status is Status.MANUAL and results["oom.fix.paged-kv"].evidence
    assert len(results) == len(pb.steps)
    counts = run.counts()
    assert counts["passed"] == 1 and counts["failed"] == 1 and sum(counts.values()) == len(pb.steps)
    out = io.StringIO()
    print_playbook(run, Console(file=out, width=200))
    text = out.getvalue()
    assert "oom.weights" in text and "could not be checked" in text and "1 passed, 1 failed" in text
    assert run.to_dict()["steps"][0] == {
        "id": "oom.weights",
        "section": "1. Account for the memory",
        "title": "Weights fit on each GPU with room to spare",
        "mode": "automatic",
        "status": "passed",
        "evidence": "16 GiB",
    }


def test_manual_steps_cannot_pass_and_unknown_ids_are_bugs():
    run = PlaybookRun(load_playbook("oom"))
    with pytest.raises(PlaybookError, match="manual"):
        run.passed("oom.fix.quantize", "done")
    with pytest.raises(PlaybookError, match="no step"):
        run.failed("oom.nope", "x")
    with pytest.raises(PlaybookError, match="not in playbook"):
        run.run({"oom.nope": lambda: (True, "")})


def test_malformed_playbooks_are_rejected():
    with pytest.raises(PlaybookError, match="duplicate"):
        parse_playbook("# T\n## S\n### [a.b] one (manual)\n### [a.b] two (automatic)\n", "dup")
    with pytest.raises(PlaybookError, match="step heading"):
        parse_playbook("# T\n### a step without an id\n", "bad")
    with pytest.raises(PlaybookError, match="no steps"):
        parse_playbook("# T\njust prose\n", "empty")
