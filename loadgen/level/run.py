"""run_level: one load level, driven from the caller's (unpatched) process: the workload checked here
first (a bad option fails before any process starts), the locust processes started
(processes.py), the parent's loop until the level ends (loop.py), the processes stopped."""

from __future__ import annotations

import tempfile
from typing import Callable

from loadgen.level.loop import LevelLoop
from loadgen.level.processes import LocustProcess, start_processes, stop_all
from loadgen.specs import LevelProgress, LevelResult, LevelSpec, TargetSpec
from loadgen.token_count import ClientTokenCounter, records_without_counting
from loadgen.workloads import Workload, level_workload_factory
from rundir import RequestRecord


def run_level(
    spec: LevelSpec,
    target: TargetSpec,
    workload_factory: Callable[[LevelSpec], Workload] | None,
    on_records: Callable[[list[RequestRecord]], None],
    on_progress: Callable[[LevelProgress], None] | None = None,
    master_bind: str | None = None,
) -> LevelResult:
    """Run one level against `target` and return its counts and client health.

    workload_factory(spec) builds the level's Workload (None: random prompts of spec.input_len /
    spec.output_len); it runs here first, so a bad option or a missing dataset fails before any
    process starts, and its options are what the locust processes rebuild it from.
    master_bind="host:port": run a master there and wait for spec.workers workers started
    elsewhere (`python -m loadgen.locust_proc --worker --master-host ...`) instead of local ones.
    """
    workload = (workload_factory or level_workload_factory())(spec)
    if not workload.rebuildable:
        raise ValueError(
            "the workload was built with a length_fn, which cannot reach the locust processes: "
            "give WorkloadOptions.tokenizer instead"
        )
    if target.endpoint == "chat" and not isinstance(workload.spec(0).prompt, str):
        raise ValueError("the chat endpoint needs text prompts: use the sharegpt workload or endpoint='completions'")
    config = {"level": spec.to_dict(), "target": target.to_dict(), "workload": workload.options.to_dict()}
    with tempfile.TemporaryDirectory(prefix="llmbench-loadgen-") as logdir:
        procs: list[LocustProcess] = []  # filled as they start: a Ctrl-C while starting stops those
        loop = None
        try:
            start_processes(spec, config, logdir, master_bind, procs)
            tokenizer = config["workload"].get("tokenizer")
            loop = LevelLoop(
                spec,
                procs,
                on_records,
                on_progress,
                ClientTokenCounter(tokenizer).records if tokenizer else records_without_counting,
            )
            return loop.run()
        finally:
            # After a clean end the processes are already quitting: let them, rather than interrupt them.
            stop_all(procs, polite_s=3.0 if loop is not None and loop.end is not None else 0.0)
