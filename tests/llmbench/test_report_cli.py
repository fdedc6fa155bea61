"""`llmbench report` and `llmbench compare` as a user runs them (in-process through typer's runner;
the slow real-run test runs them as subprocesses): files written, tables printed, mistakes answered
in one line."""

from synth_run import make_run, rec
from typer.testing import CliRunner

from llmbench.cli import app


def said(res) -> str:
    return " ".join(res.output.split())  # rich wraps long lines at the terminal width


def _run(path, scale=1.0, levels=("c1", "c2")):
    records = [
        rec(
            i * 0.05,
            (0.1 + 0.002 * (i % 50)) * scale,
            (0.4 + 0.003 * (i % 40)) * scale,
            11,
            level=lv,
            concurrency=int(lv[1:]),
        )
        for lv in levels
        for i in range(150)
    ]
    return make_run(path, records, {lv: (0, 7.5) for lv in levels})


def test_report_and_compare_commands(tmp_path):
    runner = CliRunner()
    a = _run(tmp_path / "a")
    res = runner.invoke(app, ["report", str(a.path)])
    assert res.exit_code == 0, res.output
    assert "c2" in res.output and "Highest load within the SLO: c2" in said(res)
    for name in ("report.html", "report.md", "summary.csv", "summary.json"):
        assert (a.path / name).is_file()
    b = _run(tmp_path / "b", scale=2.0, levels=("c2", "c4"))
    res = runner.invoke(app, ["compare", str(a.path), str(b.path), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "worse" in res.output and "only in A: c1" in said(res) and "only in B: c4" in said(res)
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<script" not in html and "worse" in html
    assert "worse" in (tmp_path / "cmp" / "compare.md").read_text()


def test_user_mistakes_are_one_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a run directory" in said(res) and res.exception.__class__ is SystemExit
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    res = runner.invoke(app, ["report", str(bad)])
    assert res.exit_code == 2 and "malformed run directory" in said(res) and "Traceback" not in said(res)
    res = runner.invoke(app, ["compare", str(tmp_path / "nope"), str(bad)])
    assert res.exit_code == 2 and "not a run directory" in said(res)
