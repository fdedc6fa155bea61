"""Every reader of a run directory validates what it reads: a line that is not a record is counted
and reported (the torn last line of a killed run only noted), a record of the wrong type is a
one-line error naming the file and line, a broken run.json is one line, and no traceback reaches a
user of `llmbench report` or `llmdiag p99`."""

from __future__ import annotations

import json

import pytest
from synth_run import T0, make_run
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.diag_cli import app as diag_app
from rundir import RequestRecord, RunDir, RunDirError
from rundir.table import RequestTable


def _records(n: int = 12) -> list[RequestRecord]:
    out = []
    for i in range(n):
        r = RequestRecord(
            level_id="c1",
            concurrency=1,
            request_rate=None,
            target_input_len=10,
            target_output_len=11,
            t_scheduled=T0 + i,
            t_sent=T0 + i,
            t_first_token=T0 + i + 0.1,
            t_done=T0 + i + 0.6,
            status="ok",
            in_window=True,
            prompt_tokens=10,
            completion_tokens=11,
            itl_s=[0.05] * 10,
        )
        out.append(r.derive())
    return out


@pytest.fixture
def run(tmp_path) -> RunDir:
    return make_run(tmp_path / "run", _records(), windows={"c1": (0, 12)})


def _edit(run: RunDir, line: int, change) -> None:
    lines = run.requests_jsonl.read_text().splitlines()
    lines[line - 1] = change(lines[line - 1])
    run.requests_jsonl.write_text("\n".join(lines) + "\n")


def test_unreadable_lines_are_counted_and_named_the_torn_last_line_only_noted(run):
    _edit(run, 3, lambda s: s[:20])
    _edit(run, 5, lambda s: "not json at all")
    with open(run.requests_jsonl, "a") as f:
        f.write('{"level_id": "c1", "t_sen')  # killed mid-write: no newline
    table = RequestTable.load(run)
    assert len(table) == 10
    assert table.read.unreadable == [3, 5] and table.read.torn_last_line
    assert "2 line(s) could not be read and are not counted (line 3, 5)" in table.warnings[0]
    r = CliRunner().invoke(app, ["report", str(run.path)])
    assert r.exit_code == 0 and "could not be read" in r.output


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("ttft_s", "abc", "must be a number"),
        ("status", "weird", "must be one of ok"),
        ("in_window", "yes", "must be true or false"),
        ("level_id", 7, "must be a string"),
        ("itl_s", ["x"], "must be a list of numbers"),
    ],
)
def test_a_record_of_the_wrong_type_is_one_line_naming_file_and_line(run, field, value, expected):
    _edit(run, 4, lambda s: json.dumps({**json.loads(s), field: value}))
    with pytest.raises(RunDirError, match=rf"requests.jsonl:4: .*{expected}"):
        RequestTable.load(run)
    for cli, args in ((app, ["report", str(run.path)]), (diag_app, ["p99", str(run.path)])):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and "requests.jsonl:4" in r.output.replace("\n", "") and "Traceback" not in r.output, (
            r.output
        )


@pytest.mark.parametrize(
    "text",
    [
        '{"run_id": "x", "comm',
        "[1, 2]",
        '{"run_id": "x"}',
        '{"run_id": "x", "command": [], "host": {}, "status": "odd"}',
    ],
)
def test_a_broken_run_json_is_one_line(run, text):
    run.run_json.write_text(text)
    for cli, args in ((app, ["report", str(run.path)]), (diag_app, ["p99", str(run.path)])):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and "run.json" in r.output and "Traceback" not in r.output, r.output


def test_a_summary_of_the_wrong_shape_is_recomputed(run):
    run.summary_json.write_text("[1, 2, 3]")
    assert run.read_summary() is None
    r = CliRunner().invoke(app, ["report", str(run.path)])
    assert r.exit_code == 0, r.output
    assert isinstance(json.loads(run.summary_json.read_text()), dict)
