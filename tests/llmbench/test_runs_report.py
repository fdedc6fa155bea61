"""`llmbench report --runs` (runs.html: every run's throughput-latency curve and the per-user vs
per-replica frontier) and `llmbench export --parquet/--csv` (every request of the runs in one table),
on real run directories written through RunDir."""

import json
import re

import pandas as pd
import pytest
from synth_run import make_run, rec
from typer.testing import CliRunner

from analyzers.run_curves import curves_of
from analyzers.summary import analyze_run
from llmbench.cli import app

TPOT = {"c1": 0.020, "c4": 0.040, "c8": 0.080}  # each level's every request: 11 tokens, this TPOT


def _run(path, model, levels=("c1", "c4", "c8"), replicas=None):
    records = [
        rec(i * 0.05, 0.1, 0.1 + 10 * TPOT[lv], 11, level=lv, concurrency=int(lv[1:]), itl=[TPOT[lv]] * 10)
        for lv in levels
        for i in range(120)
    ]
    run = make_run(path, records, {lv: (0, 6.0) for lv in levels}, model=model)
    if replicas is not None:
        info = run.read_info()
        info.target.replicas = replicas
        run.write_info(info)
    return run


def said(res) -> str:
    return " ".join(res.output.split())


def test_the_curves_are_each_runs_levels_per_user_and_per_replica(tmp_path):
    one = curves_of(analyze_run(_run(tmp_path / "a", "model-a"))[0])
    two = curves_of(analyze_run(_run(tmp_path / "b", "model-b", replicas=2))[0])
    (a,), (b,) = one, two
    assert [p.level_id for p in a.points] == ["c1", "c4", "c8"] and a.closed_loop
    assert [p.per_user_tok_s for p in a.points] == pytest.approx([50.0, 25.0, 12.5])  # 1 / TPOT P50
    assert [p.per_replica_tok_s for p in a.points] == [p.output_tok_s for p in a.points]  # one replica
    assert [p.per_replica_tok_s for p in b.points] == pytest.approx([p.output_tok_s / 2 for p in b.points])
    assert all(p.output_tok_s > 0 and p.slo_met is not None for p in a.points)
    assert "model-a" in a.label and "2 replicas" in b.label and "model-b" in b.label


def test_a_level_that_is_no_measurement_is_named_and_left_out_of_the_figures(tmp_path):
    run = _run(tmp_path / "a", "model-a")
    info = run.read_info()
    info.level_meta["c8"].cut_short = True  # interrupted: INVALID, no verdict
    run.write_info(info)
    (curve,) = curves_of(analyze_run(run)[0])
    assert [p.level_id for p in curve.plotted] == ["c1", "c4"]
    assert curve.points[2].invalid.startswith("interrupted: measured")
    from reports.write import write_runs_report

    _, path = write_runs_report([run], tmp_path / "out")
    html = path.read_text()
    assert "not plotted: interrupted: measured" in html and "2 (+1 not a measurement)" in html


def test_report_runs_writes_one_self_contained_page_and_names_every_run(tmp_path):
    a, b = _run(tmp_path / "runs" / "a", "model-a"), _run(tmp_path / "runs" / "b", "model-b", ("c1", "c4"), 2)
    res = CliRunner().invoke(app, ["report", "--runs", str(a.path), str(b.path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "a · model-a · random · concurrency · in 10 · out 11: 3 levels" in said(res)
    html = (tmp_path / "out" / "runs.html").read_text()
    assert html.count("<svg") == 2 and "<script" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched
    for words in (
        "per-user output tokens/s (1 / TPOT P50)",
        "output tokens/s per replica",
        "TTFT P99 against",
        "a · model-a · random",
        "b · model-b · random · concurrency · in 10 · out 11 · 2 replicas",
    ):
        assert words in html, words
    points = re.findall(r"<tr><td class=\"l\">\d</td><td class=\"l\">(\w)</td><td class=\"l\">(c\d)</td>", html)
    assert points == [("a", "c1"), ("a", "c4"), ("a", "c8"), ("b", "c1"), ("b", "c4")]
    # a folder of runs is every run in it
    res = CliRunner().invoke(app, ["report", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out2")])
    assert res.exit_code == 0 and "wrote" in res.output and "(2 runs)" in said(res), res.output


def test_report_runs_mistakes_are_one_line(tmp_path):
    a, b = _run(tmp_path / "a", "m"), _run(tmp_path / "b", "m")
    for args in (
        ["report", str(a.path), str(b.path)],
        ["report", "--runs", str(a.path), str(tmp_path / "nope")],
        ["export", str(a.path)],
    ):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, (args, res.output)
    assert "--runs" in said(CliRunner().invoke(app, ["report", str(a.path), str(b.path)]))


def test_export_writes_every_request_of_the_runs_to_parquet_and_csv(tmp_path):
    a, b = _run(tmp_path / "a", "model-a", ("c1", "c4")), _run(tmp_path / "b", "model-b", ("c8",))
    out = tmp_path / "x" / "requests.parquet"
    res = CliRunner().invoke(
        app, ["export", str(a.path), str(b.path), "--parquet", str(out), "--csv", str(tmp_path / "requests.csv")]
    )
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(out)
    lines = [json.loads(x) for p in (a, b) for x in p.requests_jsonl.read_text().splitlines()]
    assert len(df) == len(lines) == 360
    assert list(df.columns[:4]) == ["run_id", "level_id", "load", "load_kind"]
    assert df["run_id"].tolist() == ["a"] * 240 + ["b"] * 120
    assert df.groupby("level_id")["load"].first().to_dict() == {"c1": 1.0, "c4": 4.0, "c8": 8.0}
    assert (df["load_kind"] == "concurrency").all()
    assert df["ttft_s"].tolist() == pytest.approx([x["ttft_s"] for x in lines])
    assert df["t_sent"].tolist() == [x["t_sent"] for x in lines]
    assert df["completion_tokens"].dtype == "Int64" and df["completion_tokens"].tolist() == [11] * 360
    assert [list(g) for g in df["itl_s"].iloc[[0, 359]]] == [lines[0]["itl_s"], lines[359]["itl_s"]]
    csv = pd.read_csv(tmp_path / "requests.csv")
    assert len(csv) == 360 and "itl_s" not in csv.columns and csv["tpot_s"].tolist() == pytest.approx(df["tpot_s"])
