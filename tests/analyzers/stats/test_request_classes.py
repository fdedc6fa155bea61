"""Request classes of a mixed workload: summarized apart, rendered, and compared like levels."""

from __future__ import annotations

import json

from synth_run import make_run, rec

from analyzers.compare import compare_runs
from analyzers.summary import analyze_run
from reports.write import write_reports


def _mixed(path, short_ttft: float):
    # 40 short prompts (10 tokens) and 10 long ones (1000 tokens) in one level
    recs = [rec(0.1 * i, short_ttft, short_ttft + 0.5, 11, n_in=10) for i in range(40)]
    recs += [rec(0.1 * i + 0.05, 1.0, 1.5, 11, n_in=1000) for i in range(10)]
    return make_run(path, recs, windows={"c1": (0.0, 10.0)})


def test_classes_are_summarized_apart(tmp_path):
    summary, _ = analyze_run(_mixed(tmp_path / "a", 0.2))
    assert [c.level_id for c in summary.classes] == ["c1/in10", "c1/in1000"]
    short, long = summary.classes
    assert short.n_ok == 40 and abs(short.ttft.p["p99"] - 0.2) < 1e-6 and abs(long.ttft.p["p50"] - 1.0) < 1e-6
    assert summary.levels[0].n_ok == 50  # the level itself is unchanged
    assert summary.to_dict()["classes"][0]["level_id"] == "c1/in10"


def test_one_prompt_length_has_no_classes(tmp_path):
    run = make_run(tmp_path / "a", [rec(0.1 * i, 0.2, 0.7, 11) for i in range(20)], windows={"c1": (0.0, 10.0)})
    assert analyze_run(run)[0].classes == []


def test_compare_reaches_the_short_class(tmp_path):
    a, b = analyze_run(_mixed(tmp_path / "a", 0.6)), analyze_run(_mixed(tmp_path / "b", 0.2))
    cmp = compare_runs(a, b)
    assert [lc.level_id for lc in cmp.levels] == ["c1", "c1/in10", "c1/in1000"]
    short = {d.metric: d.verdict for d in cmp.levels[1].deltas}
    assert short["TTFT P99"] == "better"
    long = {d.metric: d.verdict for d in cmp.levels[2].deltas}
    assert long["TTFT P99"] == "within noise"


def test_report_shows_classes_and_a_diagnosis(tmp_path):
    run = _mixed(tmp_path / "a", 0.2)
    (run.path / "diagnosis_p99.json").write_text(
        json.dumps(
            {
                "headline": "<b>long prefills</b> block short requests",
                "metric": "ttft",
                "spike_windows": [{}],
                "spike_seconds": 1.5,
                "findings": [
                    {
                        "category": "scheduling",
                        "severity": "high",
                        "title": "HOL <x>",
                        "explains": [{}],
                        "spike_windows": 1,
                        "next_step": "chunked prefill",
                    }
                ],
                "playbook": {
                    "playbook": "p99",
                    "steps": [{"id": "p99.sched.long-prefill", "title": "t", "status": "failed", "evidence": "e"}],
                },
            }
        )
    )
    _, paths = write_reports(run)
    html = paths["html"].read_text()
    assert 'id="class-table"' in html and "c1/in1000" in html
    assert 'id="diagnosis"' in html and "&lt;b&gt;long prefills&lt;/b&gt;" in html and "HOL &lt;x&gt;" in html
    assert "p99.sched.long-prefill" in html
    md = paths["md"].read_text()
    assert "Request classes" in md and "Diagnosis" in md
