"""Findings are grouped by kind across levels: each said once, naming its levels; benign differences
carry one plain-words explanation; the run's validity problems come first."""

from synth_run import make_run, rec

from analyzers.summary import analyze_run
from rundir import LevelMeta


def _run(tmp_path, adaptations=None, notes=None):
    records = []
    for c in (1, 2, 4, 8):
        for i in range(20):
            r = rec(i * 0.5, 0.1 * c, 0.1 * c + 0.3, 11, level=f"c{c}", concurrency=c)
            r.client_token_chunks = 10  # 11 tokens in 10 chunks: one carried two
            r.client_completion_tokens = 13  # the client's tokenizer counts +18%
            records.append(r)
    records.append(
        rec(3, None, None, 11, status="error", level="c8", concurrency=8, kind="http_status", error="HTTP 500")
    )
    run = make_run(tmp_path / "run", records, {f"c{c}": (0, 10) for c in (1, 2, 4, 8)})
    info = run.read_info()
    info.target.adaptations = adaptations or []
    for level, note in (notes or {}).items():
        info.level_meta[level].notes = [note]
    run.write_info(info)
    return analyze_run(run)[0]


def test_each_kind_once_with_its_levels(tmp_path):
    s = _run(tmp_path)
    kinds = [f.kind for f in s.finding_groups]
    assert len(kinds) == len(set(kinds)), kinds  # no kind said twice
    by = {f.kind: f for f in s.finding_groups}
    assert by["multi_token_chunks"].levels == ["c1", "c2", "c4", "c8"]
    assert by["multi_token_chunks"].severity == "benign" and "detokenizer" in by["multi_token_chunks"].detail
    assert by["tokenizer_count"].levels == ["c1", "c2", "c4", "c8"] and "+18%" in by["tokenizer_count"].text
    assert (
        by["p99_unreliable"].text.startswith("P99 from fewer than 100 samples")
        and "c4 (n=20)" in by["p99_unreliable"].text
    )
    assert by["errors"].levels == ["c8"] and by["errors"].severity == "caveat"
    assert sum("chunk" in t for t in s.findings) == 1 and sum("tokenizer" in t for t in s.findings) == 1
    # benign ones last
    assert [f.severity for f in s.finding_groups][-2:] == ["benign", "benign"]


def test_validity_problems_come_first(tmp_path):
    s = _run(
        tmp_path,
        adaptations=[{"field": "ignore_eos", "action": "dropped", "consequence": "outputs may end before max_tokens"}],
        notes={
            "c4": "INVALID: the client fell behind (send lag P99 80 ms); add --workers",
            "c8": "INVALID: the client fell behind (send lag P99 120 ms); add --workers",
        },
    )
    first = s.finding_groups[0]
    assert first.kind == "client_behind" and first.severity == "invalid" and first.levels == ["c4", "c8"]
    assert "c4 (send lag P99 80 ms)" in first.text
    adapt = next(f for f in s.finding_groups if f.kind == "adaptation")
    assert "ignore_eos dropped" in adapt.text and "outputs may end before max_tokens" in adapt.text
    assert s.to_dict()["finding_groups"][0]["kind"] == "client_behind"


def test_a_stall_is_said_as_invalid_not_as_a_bound_without_a_number(tmp_path):
    itl = [0.05] * 5 + [6.0] + [0.05] * 4  # every stream silent for 6 s at once
    records = [rec(0.01 * u, 0.1, 0.1 + sum(itl), 11, level="c4", concurrency=4, itl=itl) for u in range(4)]
    records += [rec(0.5 * i, 0.1, 0.4, 11, level="c1", concurrency=1) for i in range(20)]
    s = analyze_run(make_run(tmp_path / "run", records, {"c4": (0, 10), "c1": (0, 10)}))[0]
    lv = {x.level_id: x for x in s.levels}["c4"]
    assert lv.slo_met is False and any("delivered no token" in b for b in lv.slo_broken)
    texts = [f.text for f in s.finding_groups]
    assert not any("bound )" in t or "Over the SLO on the server" in t for t in texts), texts
    assert any("delivered no token for 6" in t and f.severity == "invalid" for f, t in zip(s.finding_groups, texts))


def test_a_finished_level_without_records_is_said_not_dropped(tmp_path):
    run = make_run(
        tmp_path / "run", [rec(0.5 * i, 0.1, 0.4, 11, level="c1", concurrency=1) for i in range(20)], {"c1": (0, 10)}
    )
    info = run.read_info()
    info.levels_done.append("c64")
    info.level_meta["c64"] = LevelMeta(notes=["INVALID: 64 requests sent but never reported by the client"])
    run.write_info(info)
    s = analyze_run(run)[0]
    f = next(f for f in s.finding_groups if f.kind == "no_records")
    assert f.severity == "invalid" and f.levels == ["c64"] and "64 requests sent but never reported" in f.text


def test_arrivals_notes_keep_each_levels_own_numbers(tmp_path):
    """Grouped by their words alone, the first level's rates were printed for every level."""
    from loadgen.level.loop import arrivals_note  # the notes as the load generator writes them

    def note(offered, achieved):
        return arrivals_note(offered, achieved, 10.0, 0.0041)

    s = _run(tmp_path, notes={"c1": note(40, 40), "c2": note(80, 79), "c4": note(160, 90)})
    by = {f.kind: f for f in s.finding_groups}
    assert by["arrivals"].levels == ["c1", "c2"] and by["arrivals"].severity == "info"
    assert "c1 (4.00 → 4.00, lag 4.1 ms), c2 (8.00 → 7.90, lag 4.1 ms)" in by["arrivals"].text
    assert by["arrivals_short"].levels == ["c4"] and by["arrivals_short"].severity == "warning"
    assert "16.00 → 9.00" in by["arrivals_short"].text


def test_a_probe_that_recorded_nothing_is_a_caveat(tmp_path):
    run = make_run(
        tmp_path / "run", [rec(0.5 * i, 0.1, 0.4, 11, level="c1", concurrency=1) for i in range(20)], {"c1": (0, 10)}
    )
    info = run.read_info()
    info.probes = {"host": "ok", "server": "failed: none of its 40 samples succeeded (OSError: 404 Not Found)"}
    run.write_info(info)
    f = next(f for f in analyze_run(run)[0].finding_groups if f.kind == "probe_failed")
    assert f.severity == "caveat" and "The server probe recorded nothing" in f.text and "404" in f.text


def test_a_fleet_replica_the_server_probe_never_read_is_a_caveat(tmp_path):
    run = make_run(
        tmp_path / "run", [rec(0.5 * i, 0.1, 0.4, 11, level="c1", concurrency=1) for i in range(20)], {"c1": (0, 10)}
    )
    info = run.read_info()
    info.probes = {"server": "partial: replica 1 (http://b:8000/metrics) was never read (connection refused)"}
    run.write_info(info)
    f = next(f for f in analyze_run(run)[0].finding_groups if f.kind == "probe_partial")
    assert f.severity == "caveat" and "replica 1 (http://b:8000/metrics) was never read" in f.text


def test_what_a_trace_level_replayed_is_a_fact_with_each_levels_own_words(tmp_path):
    s = _run(
        tmp_path,
        notes={
            "c1": "the trace (24 requests, 3.0 s) played once: 24 requests sent",
            "c2": "the trace (24 requests, 3.0 s) cycled 8.3 times to fill 25 s (--trace-loop): 201 requests sent",
        },
    )
    f = next(f for f in s.finding_groups if f.kind == "trace_replay")
    assert f.severity == "info" and f.levels == ["c1", "c2"]
    assert (
        "c1 (the trace (24 requests, 3.0 s) played once: 24 requests sent)" in f.text and "cycled 8.3 times" in f.text
    )
