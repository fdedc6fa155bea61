"""End to end: `llmbench sweep` against the embedded engine writes a valid run directory, and
`--resume` completes an interrupted one."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from refengine_proc import start_refengine

from rundir import RequestRecord, RunDir

SWEEP = [
    sys.executable,
    "-m",
    "llmbench.cli",
    "sweep",
    "--model",
    "tiny-test",
    "--input-len",
    "16",
    "--output-len",
    "8",
    "--warmup",
    "1s",
    "--duration",
    "3s",
    "--request-timeout",
    "30s",
]


ENV = {**os.environ, "COLUMNS": "200"}  # rich boxes wrap long messages at 80 columns


def _run(args, **kw):
    return subprocess.run(SWEEP + args, capture_output=True, text=True, timeout=300, env=ENV, **kw)


@pytest.mark.slow
def test_two_level_sweep_writes_a_valid_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = _run(["--concurrency", "1,4", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(out)
    info = run.read_info()
    assert info.status == "complete" and info.levels_done == ["c1-in16-out8", "c4-in16-out8"]
    assert info.target.kind == "embedded"
    records = list(run.iter_records())
    assert {r.level_id for r in records} == set(info.levels_done)
    ok = [r for r in records if r.status == "ok"]
    assert ok and all(r.completion_tokens == 8 and r.prompt_tokens == 16 for r in ok)
    assert all(r.ttft_s > 0 and r.e2e_s >= r.ttft_s for r in ok)
    for line in run.requests_jsonl.read_text().splitlines():
        RequestRecord.from_dict(json.loads(line))  # every line fits the contract
    summary = run.read_summary()
    assert [lv["level_id"] for lv in summary["levels"]] == info.levels_done
    for lv in summary["levels"]:
        assert lv["n_in_window"] == sum(1 for r in records if r.level_id == lv["level_id"] and r.in_window)
        assert lv["n_error"] == 0 and lv["output_tok_s"] > 0
    assert "c4" in proc.stdout and "TTFT" in proc.stdout
    # the sweep diagnoses its own tail and the report shows the diagnosis
    diagnosis = json.loads((out / "diagnosis_p99.json").read_text())
    assert diagnosis["run_id"] == info.run_id and diagnosis["playbook"]["playbook"] == "p99"
    assert "P99 diagnosis:" in proc.stdout and 'id="diagnosis"' in (out / "report.html").read_text()
    assert info.target.engine_facts["cache_config"]["block_size"]  # the target's own account


@pytest.mark.slow  # ~35 s each; .ci/run runs it (--runslow)
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_interrupted_sweep_resumes_at_first_unfinished_level(tmp_path, stop):
    """Ctrl-C, or a plain `kill` (what a CI runner or a container stop sends): the sweep stops in
    order, leaves no process of its own behind, and resumes."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        SWEEP + ["--concurrency", "1,2", "--duration", "4s", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
    )
    run = RunDir(out)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # wait until the first level is done, then interrupt
        if run.exists() and run.read_info().levels_done:
            break
        time.sleep(0.2)
    started = _descendants(proc.pid)
    proc.send_signal(stop)
    assert proc.wait(timeout=120) == 130, proc.stdout.read()
    info = run.read_info()
    assert info.status == "interrupted" and info.levels_done == ["c1-in16-out8"]
    assert started and not [p for p in started if _alive(p)], (
        "the sweep left its engine or load generator running: "
        + "; ".join(open(f"/proc/{p}/cmdline").read().replace("\0", " ") for p in started if _alive(p))
    )
    resumed = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "sweep", "--resume", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    info = run.read_info()
    assert info.status == "complete" and info.levels_done == ["c1-in16-out8", "c2-in16-out8"]
    levels = {r.level_id for r in run.iter_records()}
    assert levels == {"c1-in16-out8", "c2-in16-out8"}


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (the bundled engine; the locust processes, in sessions of their own)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    children: dict[int, list[int]] = {}
    for child, parent in zip(map(int, out[::2]), map(int, out[1::2])):
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_bad_options_are_one_line_errors(tmp_path):
    proc = _run(["--concurrency", "1,x", "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = _run(["--concurrency", "1", "--request-rate", "2", "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "exactly one" in proc.stdout + proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "sweep", "--resume", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert proc.returncode == 2 and "not a run directory" in proc.stdout + proc.stderr


@pytest.mark.slow  # ~20 s; .ci/run runs it (--runslow)
def test_two_workers_account_for_every_request(tmp_path):
    out = tmp_path / "run"
    proc = _run(["--concurrency", "4", "--workers", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(out)
    records = list(run.iter_records())
    assert len({r.worker_id for r in records}) == 2
    lv = run.read_summary()["levels"][0]
    assert lv["n_in_window"] == sum(r.in_window for r in records) and lv["n_ok"] == lv["n_in_window"]
    assert not any("never reported" in n for n in lv["notes"])


@pytest.mark.slow  # ~10 s, a second guard of a path another default test covers; .ci/run runs it
def test_target_killed_mid_sweep_leaves_an_interrupted_run(tmp_path):
    server, url = start_refengine(quiet=True)
    try:
        deadline = time.monotonic() + 120
        out = tmp_path / "run"
        sweep = subprocess.Popen(
            SWEEP
            + [
                "--target",
                url,
                "--concurrency",
                "2,4",
                "--duration",
                "6s",
                "--tokenizer",
                _tiny_test_dir(),
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=ENV,
        )
        run = RunDir(out)
        while time.monotonic() < deadline and not (run.exists() and any(True for _ in run.iter_records())):
            time.sleep(0.2)
        server.kill()
        output, _ = sweep.communicate(timeout=180)
    finally:
        server.kill()
    info = run.read_info()
    assert info.status == "interrupted", output
    assert list(run.iter_records()), "what was measured before the kill is kept"
    assert "Traceback" not in output


def _tiny_test_dir() -> str:
    from refengine.model.tiny import resolve_model

    return str(resolve_model("tiny-test"))
