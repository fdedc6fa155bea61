"""`llmbench runs`: the run directories of a folder, newest first, with their answers; unreadable
folders are skipped, and a narrow terminal gets blocks instead of a table that would break ids."""

import json
import os
import subprocess
import sys

from llmbench.runs import run_lines
from rundir import RunDir, RunInfo


def _run(path, started, best, status="complete"):
    run = RunDir(path)
    run.create(
        RunInfo.from_dict(
            dict(
                run_id=path.name,
                command=["llmbench", "sweep"],
                host={},
                status=status,
                started=started,
                levels_done=["c1-in16-out8", "c4-in16-out8"],
                target={"url": None, "model": "tiny-test", "kind": "embedded"},
            )
        )
    )
    run.write_summary({"levels": [], "best_level_within_slo": best})
    return run


def test_runs_are_listed_newest_first_with_their_answers(tmp_path):
    _run(tmp_path / "old", 1_800_000_000.0, "c4-in16-out8")
    _run(tmp_path / "new", 1_800_000_600.0, None, status="interrupted")
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{ torn")
    lines = run_lines(tmp_path)
    assert [x.run_id for x in lines] == ["new", "old"]
    assert lines[0].answer == "no level within the SLO" and lines[0].status == "interrupted"
    assert lines[1].answer == "within the SLO up to c4-in16-out8" and lines[1].levels == 2


def test_the_command_prints_blocks_at_80_columns_and_json_on_request(tmp_path):
    _run(tmp_path / "20261202-010000-a-run-directory-name-that-is-long", 1_800_000_000.0, "c4-in16-out8")
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "runs", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "run: 20261202-010000-a-run-directory-name-that-is-long\n" in out.stdout
    assert "  status: complete\n" in out.stdout
    assert all(len(line) <= 80 or " " in line for line in out.stdout.splitlines())
    js = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "runs", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert json.loads(js.stdout)[0]["answer"] == "within the SLO up to c4-in16-out8"
