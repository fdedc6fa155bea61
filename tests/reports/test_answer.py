"""The answer block: what it says when a level met the SLO or none did, at the knee, with and
without a diagnosis, and what makes a run not valid."""

from synth_run import make_run, rec

from analyzers.summary import analyze_run
from reports.answer import build_answer
from reports.evidence_units import evidence_name, fmt_evidence


def _summary(tmp_path, ttft_by_level, windows=None, meta_notes=None):
    records = []
    for level, ttft in ttft_by_level.items():
        c = int(level[1:])
        records += [rec(i * 0.1, ttft, ttft + 0.3, 11, level=level, concurrency=c) for i in range(50)]
    run = make_run(tmp_path / "r", records, windows or {lv: (0, 5) for lv in ttft_by_level})
    if meta_notes:
        info = run.read_info()
        for level, note in meta_notes.items():
            info.level_meta[level].notes = [note]
        run.write_info(info)
    return analyze_run(run)[0]


def _by_label(items):
    return {a.label: a for a in items}


def test_met_and_knee_and_no_diagnosis(tmp_path):
    s = _summary(tmp_path, {"c1": 0.1, "c4": 0.2, "c16": 2.0})
    a = _by_label(build_answer(s))
    best = a["Highest load within the SLO"]
    assert best.tone == "good" and best.text.startswith("c4 (load 4)") and "95% CI" in best.text
    assert "TTFT P99" in best.text and "highest load tested" not in best.text
    assert "not diagnosed" in a["Why the tail"].text
    assert a["Validity"].tone == "good"


def test_none_met_says_what_the_lowest_load_broke(tmp_path):
    a = _by_label(build_answer(_summary(tmp_path, {"c1": 2.0, "c2": 3.0})))
    assert a["Highest load within the SLO"].tone == "bad"
    assert (
        "even the lowest load, c1, missed the SLO (TTFT P99 2000 ms > 1500 ms)" in a["Highest load within the SLO"].text
    )


def test_validity_names_what_undermines_the_run(tmp_path):
    s = _summary(
        tmp_path,
        {"c1": 0.1, "c8": 0.2},
        meta_notes={"c8": "INVALID: the client fell behind (send lag P99 80 ms); add --workers"},
    )
    diagnosis = {
        "metric": "ttft",
        "headline": "the client sent requests late",
        "spike_windows": [{"start": 0, "end": 1}],
        "spike_seconds": 1.0,
        "findings": [
            {
                "category": "client",
                "severity": "high",
                "title": "the client sent requests late",
                "evidence": {"send_lag_p99_s": 0.08, "spikes": 4},
                "explains": [{"start": 0, "end": 1}],
                "spike_windows": 1,
            }
        ],
    }
    a = _by_label(build_answer(s, diagnosis))
    v = a["Validity"]
    assert v.tone == "bad" and v.text == "not valid as it stands."
    assert any("client fell behind: c8 (send lag P99 80 ms)" in e for e in v.evidence)
    assert any(e.startswith("The P99 diagnosis: the client sent requests late") for e in v.evidence)
    why = a["Why the tail"]
    assert why.tone == "bad" and why.evidence[0] == "It coincides with 1 of the 1 spike window."
    assert "The load generator sent requests 80 ms late at P99." in why.evidence


def test_evidence_units():
    assert fmt_evidence("prefill_p99_s", 0.42) == "420.0 ms"
    # a server histogram quantile known only as a bound: "< 300 ms", never a number (docs/probes.md)
    assert fmt_evidence("queue_time_p99_spikes_lt_s", 0.3) == "< 300 ms"
    assert evidence_name("queue_time_p99_spikes_lt_s") == "queue time p99 spikes"
    assert fmt_evidence("e2e_p99_gt_s", 7680.0) == "> 7680 s"
    assert (
        fmt_evidence("server", {"queue_time_mean_s": 1e-5, "queue_time_p99_max_lt_s": 0.3})
        == "queue time mean 0.01 ms, queue time p99 max < 300 ms"
    )
    assert fmt_evidence("mem_bytes", 3 * 2**20) == "3.0 MiB"
    assert fmt_evidence("busiest_share", 0.83) == "83.0%"
    assert fmt_evidence("windows", [1, 2]) == "1, 2"  # the items, not a count of them
    assert fmt_evidence("limits", {"max_num_seqs": 128, "tail": None}) == "max num seqs 128"
    assert fmt_evidence("client_cpu_cores", 0.0969333) == "0.0969"  # 3 significant digits, not 6
    assert (
        fmt_evidence("top_others", [{"pid": 17665, "comm": "python", "cpu_cores": 0.08}])
        == "python (pid 17665) 0.08 cores"
    )  # a process, not a dict


def test_a_standing_tail_is_not_called_spikes():
    from reports.answer import _diagnosis

    d = {
        "metric": "ttft",
        "spike_windows": [],
        "spike_seconds": 0.0,
        "headline": "saturation",
        "findings": [
            {
                "category": "scheduling",
                "severity": "high",
                "explains": [{"start": 0, "end": 1}] * 3,
                "spike_windows": 3,
                "evidence": {},
            }
        ],
    }
    item = _diagnosis(d)
    assert "standing, no spike windows" in item.text and "0 spike window" not in item.text
    assert item.evidence[0] == "It explains the standing TTFT tail of 3 levels."


def _default_slo_summary(tmp_path, levels, slos):
    """levels: id -> (TTFT s, E2E s) of 50 requests of 11 tokens each: TPOT = (E2E - TTFT) / 10."""
    records = []
    for level, (ttft, e2e) in levels.items():
        records += [rec(i * 0.1, ttft, e2e, 11, level=level, concurrency=int(level[1:])) for i in range(50)]
    run = make_run(tmp_path / "r", records, {lv: (0, 5) for lv in levels}, slos=slos)
    return analyze_run(run)[0]


CPU_LEVELS = {"c1": (0.10, 0.70), "c8": (0.41, 1.10), "c32": (1.6, 3.0)}  # TPOT 60, 69, 140 ms


def test_without_a_user_slo_the_answer_leads_with_what_the_data_says(tmp_path):
    s = _default_slo_summary(tmp_path, CPU_LEVELS, {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05, "default": True})
    items = build_answer(s)
    labels = [a.label for a in items]
    # the ceiling and the knee first, then what each level meets, then how the default fared
    assert labels[:3] == ["Ceiling", "SLO each level meets", "Highest load within the default SLO"]
    reach = items[1].text
    assert "c1 meets TTFT P99 ≤ 100 ms, TPOT P95 ≤ 60 ms" in reach
    assert "c8 meets TTFT P99 ≤ 410 ms, TPOT P95 ≤ 69 ms" in reach and "c32 meets TTFT P99 ≤ 1600 ms" in reach
    assert "(P99 from 50 requests)" in reach  # a P99 from fewer than 100: said, not hidden
    default = items[2]
    assert default.tone == "warn" and "missed the default SLO (TPOT P95 60.0 ms > 50 ms)" in default.text
    assert any("a GPU server's" in e and "--slo-tpot" in e for e in default.evidence)


def test_a_user_slo_keeps_the_verdict_first(tmp_path):
    s = _default_slo_summary(tmp_path, CPU_LEVELS, {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05})
    items = build_answer(s)
    assert [a.label for a in items][:2] == ["Highest load within the SLO", "Ceiling"]
    assert items[0].tone == "bad" and "missed the SLO (TPOT P95 60.0 ms > 50 ms)" in items[0].text
    assert "SLO each level meets" not in [a.label for a in items]


def test_a_user_slo_given_to_report_replaces_the_default(tmp_path):
    """`llmbench report RUN --slo-tpot 0.07` judges by the user's SLO: the verdict leads again."""
    from llmbench.report import _slos

    s = _default_slo_summary(tmp_path, CPU_LEVELS, {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05, "default": True})
    slos = _slos(s.slos.to_dict(), None, 0.07, None)
    assert slos["default"] is False and _slos(s.slos.to_dict(), None, None, None)["default"] is True
    again = analyze_run(_run_of(tmp_path), slos)[0]
    best = build_answer(again)[0]
    assert best.label == "Highest load within the SLO" and best.text.startswith("c8 (load 8)")


def _run_of(tmp_path):
    from rundir import RunDir

    return RunDir(tmp_path / "r")
