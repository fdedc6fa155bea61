"""A new run from the options: the sweep's plan (SweepSpec), the target (TargetInfo: one URL, several
driven directly, or the bundled engine and its fleet), the SLO, and the run directory's path.

The directory itself is created only once the target has answered the preflight (execute.py), so a
refused or unreachable target leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import replace

import typer
from rich.console import Console

from llmbench.options.parse import parse_duration, parse_list
from llmbench.options.target import lb_policy, replica_metrics, target_urls
from llmbench.sweep.setup.args import SweepArgs
from llmbench.sweep.setup.options import slo_spec, timeline, trace_or_sessions, workload_options
from rundir import RunDir, RunInfo, TargetInfo

DEFAULT_CONCURRENCY = [1, 8, 32, 64]  # the seed's sweep (docs/yardsticks.md)


def new_run(a: SweepArgs, console: Console) -> tuple[RunDir, RunInfo]:
    from llmbench.sweep.run import default_run_dir, new_run_info
    from llmbench.sweep.spec import SweepSpec

    urls = target_urls(a.target)  # several: replicas the client balances over; the first is asked first
    a = replace(a, target=urls[0] if urls else None)
    slos = slo_spec(a)
    try:
        spec = SweepSpec(
            concurrency=parse_list(a.concurrency, int, "--concurrency")
            or ([] if a.request_rate or a.workload == "trace" else DEFAULT_CONCURRENCY),
            request_rate=parse_list(a.request_rate, float, "--request-rate")
            or ([1.0] if a.workload == "trace" and not a.concurrency else []),
            burstiness=a.burstiness,
            input_lens=parse_list(a.input_len, int, "--input-len"),
            output_lens=parse_list(a.output_len, int, "--output-len"),
            **timeline(a),
            request_timeout_s=parse_duration(a.request_timeout, "--request-timeout"),
            workers=a.workers,
            workload=workload_options(
                a.workload,
                a.dataset,
                a.input_len_spread,
                a.target,
                a.model,
                a.tokenizer,
                a.long_len,
                a.long_fraction,
                a.prompt_format,
            ),
            seed=a.seed,
        )
        trace_or_sessions(spec, a)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    kind = "external" if a.target else "embedded"
    replicas = _replicas(a, urls)
    fleet = "direct" if len(urls) > 1 else "embedded" if not urls and replicas > 1 else None
    target = TargetInfo(
        url=a.target,
        model=a.model or ("tiny" if not a.target else None),
        kind=kind,
        endpoint=a.endpoint,
        ignore_eos=a.ignore_eos,
        engine_args=list(a.engine_arg),
        server_threads=a.server_threads,
        replica_header=a.replica_header or None,
        urls=urls if len(urls) > 1 else [],
        replicas=replicas,
        lb_policy=lb_policy(a.lb_policy, fleet),
        replica_metrics=replica_metrics(a.replica_metrics, urls, replicas),
    )
    if a.endpoint not in ("completions", "chat"):
        raise typer.BadParameter(f"must be completions or chat, got {a.endpoint!r}", param_hint="--endpoint")
    run = RunDir(a.out or default_run_dir(a.label or (target.model or _host_label(a.target))))
    if run.path.exists():
        raise typer.BadParameter(f"{run.path} exists; choose another --out or --resume it")
    # Created only once the target has answered the preflight (execute_sweep): a refused or
    # unreachable target leaves no run directory behind.
    return run, new_run_info(run.path.name, spec, target, slos)


def _replicas(a: SweepArgs, urls: list[str]) -> int:
    """run.json's target.replicas: the embedded fleet's size, the URLs driven directly, or --replicas
    (for one --target URL with --replica-metrics and no --replicas: one replica per page)."""
    if urls and a.data_parallel_size != 1:
        raise typer.BadParameter(
            "starts a fleet of the bundled engine; an external fleet is one --target URL "
            "(its router's) or its replicas' URLs",
            param_hint="--data-parallel-size",
        )
    pages = len(a.replica_metrics.split(",")) if a.replica_metrics is not None else None
    behind_router = a.replicas if a.replicas != 1 or pages is None else pages
    n = a.data_parallel_size if not urls else len(urls) if len(urls) > 1 else behind_router
    if a.replicas not in (1, n):
        raise typer.BadParameter(
            f"the target has {n} replicas here (--data-parallel-size, or the --target URLs)", param_hint="--replicas"
        )
    return n


def _host_label(url: str | None) -> str:
    from urllib.parse import urlparse

    return (urlparse(url).hostname or "run").replace(".", "-") if url else "run"
