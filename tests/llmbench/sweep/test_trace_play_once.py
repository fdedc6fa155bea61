"""A trace is played once by default: the level lasts its span and sends its requests, no more.
It cycles only when asked (--trace-loop, a --duration longer than the trace, a capacity search),
and the run says which (run.json's level_meta[level].trace; docs/workloads.md, "Replay")."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os

import pytest
import typer
from rich.console import Console

from llmbench.sweep.setup.args import SweepArgs
from llmbench.sweep.setup.new_run import new_run
from loadgen.trace import load_trace
from loadgen.trace_workload import trace_replay
from loadgen.workloads import WorkloadOptions, make_workload
from reports.trace_words import trace_words
from rundir import LevelMeta, RunInfo, TraceReplay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MOONCAKE = os.path.join(ROOT, "bench", "data", "sample_mooncake.jsonl")


def _args(tmp_path, **kw) -> SweepArgs:
    base = dict(
        concurrency=None,
        request_rate=None,
        burstiness=1.0,
        input_len="128",
        output_len="64",
        input_len_spread=0.0,
        workload="trace",
        long_len=4096,
        long_fraction=0.1,
        dataset=MOONCAKE,
        warmup=None,
        duration=None,
        request_timeout="60s",
        workers=1,
        master_bind=None,
        target="http://127.0.0.1:9",
        model="m",
        api_key=None,
        endpoint="completions",
        ignore_eos=True,
        engine_arg=[],
        server_threads=None,
        slo_ttft=None,
        slo_tpot=None,
        slo_e2e=None,
        out=tmp_path / "run",
        label=None,
        resume=None,
        tokenizer=None,
        seed=0,
        prompt_format="text",
        strict=False,
        probes="none",
        probe_interval=1.0,
        server_pid=None,
        trace_limit=24,
    )
    return SweepArgs(**{**base, **kw})


def _level(tmp_path, **kw):
    run, info = new_run(_args(tmp_path, **kw), Console(file=open(os.devnull, "w")))
    (level,) = info.sweep.levels()
    return info, level


def test_by_default_the_level_lasts_the_traces_span_and_the_workload_ends_with_it(tmp_path):
    span = load_trace(MOONCAKE, 24).span_s
    info, level = _level(tmp_path)
    assert (level.warmup_s, level.duration_s) == (0.0, pytest.approx(span))
    assert info.sweep.workload.trace_loop is None and level.sample_target is None
    workload = make_workload(WorkloadOptions.of(info.sweep.workload, input_len=1, output_len=1))
    assert workload.length == 24 and len(list(workload)) == 24
    replay = trace_replay(info.sweep.workload, level, sent=24)
    assert replay.play == "once" and replay.passes == pytest.approx(1.0)
    assert trace_words(replay) == f"the trace (24 requests, {span:.1f} s) played once: 24 requests sent"
    # twice as fast: half the span
    _, fast = _level(tmp_path, trace_speed=2.0)
    assert fast.duration_s == pytest.approx(span / 2)


def test_it_cycles_when_asked_or_when_the_duration_is_longer_and_says_why(tmp_path):
    info, level = _level(tmp_path, trace_loop="--trace-loop")
    assert (level.warmup_s, level.duration_s) == (5.0, 20.0)  # the defaults: a steady stream
    assert make_workload(WorkloadOptions.of(info.sweep.workload, input_len=1, output_len=1)).length is None
    replay = trace_replay(info.sweep.workload, level)
    assert replay.play == "cycled" and replay.cycled_by == "--trace-loop"
    assert (
        trace_words(replay)
        == f"the trace (24 requests, 8.1 s) cycled {25 / replay.span_s:.1f} times to fill 25 s (--trace-loop)"
    )
    info, level = _level(tmp_path, duration="30s")
    assert info.sweep.workload.trace_loop == "--duration" and level.warmup_s == 0.0
    assert "cycled 3.7 times to fill 30 s (--duration longer than the trace)" in trace_words(
        trace_replay(info.sweep.workload, level)
    )
    info, level = _level(tmp_path, warmup="1s", duration="4s")  # shorter: its first part, once
    replay = trace_replay(info.sweep.workload, level)
    assert info.sweep.workload.trace_loop is None and replay.play == "part"
    assert trace_words(replay).startswith("the first 5.0 s of the trace (24 requests, 8.1 s) played")


def test_a_warmup_as_long_as_the_trace_is_a_one_line_error(tmp_path):
    with pytest.raises(typer.BadParameter, match="--warmup 9 s is the whole trace"):
        _level(tmp_path, warmup="9s")
    with pytest.raises(typer.BadParameter, match="--trace-loop cycles a trace"):
        _level(tmp_path, workload="random", trace_loop="--trace-loop", request_rate="1")


def test_the_replay_round_trips_through_run_json():
    replay = TraceReplay(requests=24, span_s=3.0, speed=2.0, level_s=30.0, cycled_by="capacity", sent=240)
    info = RunInfo.from_dict(
        {
            "run_id": "r",
            "command": [],
            "host": {},
            "target": {"url": None, "model": None},
            "level_meta": {"r8": dataclasses.asdict(LevelMeta(trace=replay))},
        }
    )
    again = RunInfo.from_dict(json.loads(json.dumps(info.to_dict()))).level_meta["r8"].trace
    assert again == replay and again.passes == pytest.approx(20.0) and again.play == "cycled"
    assert "a capacity level lasts" in trace_words(again)
    with pytest.raises(ValueError, match="cycled_by"):
        TraceReplay(requests=1, span_s=1.0, speed=1.0, level_s=1.0, cycled_by="always")


def test_a_trace_run_recorded_before_play_once_resumes_cycling(tmp_path):
    from llmbench.sweep.setup.resume import resumed_run
    from rundir import RunDir

    _, info = new_run(_args(tmp_path), Console(file=open(os.devnull, "w")))
    run = RunDir(tmp_path / "old")
    run.create(info)
    old = json.loads(run.run_json.read_text())
    del old["sweep"]["workload"]["trace_loop"]  # as an older tool wrote it
    run.run_json.write_text(json.dumps(old))
    _, resumed = resumed_run(run.path, Console(file=open(os.devnull, "w")))
    assert resumed.sweep.workload.trace_loop == "--trace-loop"
    _, info = new_run(_args(tmp_path), Console(file=open(os.devnull, "w")))
    run = RunDir(tmp_path / "new")
    run.create(info)
    assert resumed_run(run.path, Console(file=open(os.devnull, "w")))[1].sweep.workload.trace_loop is None


def test_the_planner_sends_a_trace_level_at_the_traces_own_times(tmp_path):
    # A trace level is named by its mean rate; its requests go at the trace's times, and the plan's
    # simulation must send them so, not at Poisson times of that mean rate.
    from llmbench.diag.plan_levels import planned_levels

    info, level = _level(tmp_path)
    (planned,) = planned_levels(info.sweep)
    times = list(itertools.islice(planned.arrivals(), 100))  # a Poisson stream would not end
    trace = load_trace(MOONCAKE, 24)
    assert times == pytest.approx([r.t_s for r in trace.rows])  # trace speed 1, played once
