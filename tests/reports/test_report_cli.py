"""`llmbench report` and `llmbench compare` as a user runs them: files written, tables printed,
mistakes answered in one line."""

import os
import subprocess
import sys

from synth_run import make_run, rec

CLI = [sys.executable, "-m", "llmbench.cli"]
ENV = {**os.environ, "COLUMNS": "200"}


def _cli(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=180, env=ENV, cwd=cwd)


def _run(path, scale=1.0, levels=("c1", "c2")):
    records = [rec(i * 0.05, (0.1 + 0.002 * (i % 50)) * scale, (0.4 + 0.003 * (i % 40)) * scale, 11, level=lv,
                   concurrency=int(lv[1:])) for lv in levels for i in range(150)]
    return make_run(path, records, {lv: (0, 7.5) for lv in levels})


def test_report_and_compare_commands(tmp_path):
    a = _run(tmp_path / "a")
    proc = _cli("report", a.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "c2" in proc.stdout and "highest load within SLO: c2" in proc.stdout
    for name in ("report.html", "report.md", "summary.csv", "summary.json"):
        assert (a.path / name).is_file()
    b = _run(tmp_path / "b", scale=2.0, levels=("c2", "c4"))
    proc = _cli("compare", a.path, b.path, "--out", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "worse" in proc.stdout and "only in A: c1" in proc.stdout and "only in B: c4" in proc.stdout
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<script" not in html and "worse" in html
    assert "worse" in (tmp_path / "cmp" / "compare.md").read_text()


def test_user_mistakes_are_one_line(tmp_path):
    from typer.testing import CliRunner

    from llmbench.cli import app

    runner = CliRunner()

    def said(res):
        return " ".join(res.output.split())          # rich wraps long lines at the terminal width

    res = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a run directory" in said(res) and res.exception.__class__ is SystemExit
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    res = runner.invoke(app, ["report", str(bad)])
    assert res.exit_code == 2 and "malformed run directory" in said(res) and "Traceback" not in said(res)
    res = runner.invoke(app, ["compare", str(tmp_path / "nope"), str(bad)])
    assert res.exit_code == 2 and "not a run directory" in said(res)
