"""`llmbench capacity`: the options; llmbench.capacity.run runs the search and states the answer.

Every `llmbench sweep` option means the same here (target, workload, workers, probes, the
preflight's adaptations, fail fast); the search's own are --by, --start, --max-load,
--resolution and --repeats. A trace (--workload trace) is searched by rate: each load replays it
at the speed that gives that mean rate, for --warmup + --duration at every load (a shorter trace is
cycled to fill the level, and each level says so: docs/workloads.md, "Replay"). Shorter levels by
default than a sweep's: a search measures many.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from llmbench.cli_common import make_console
from llmbench.options import target as target_options
from llmbench.options import workload as workload_flags
from llmbench.options.parse import seconds_text
from rundir.run_info import DEFAULT_REQUEST_TIMEOUT_S, DEFAULT_TPOT_P95_S, DEFAULT_TTFT_P99_S

CAPACITY_WARMUP = "3s"
CAPACITY_DURATION = "10s"


def capacity(
    slo_ttft: float = typer.Option(DEFAULT_TTFT_P99_S, help="SLO: TTFT P99 in seconds."),
    slo_tpot: float = typer.Option(DEFAULT_TPOT_P95_S, help="SLO: TPOT P95 in seconds."),
    slo_e2e: Optional[float] = typer.Option(None, help="SLO: E2E P99 in seconds (default: none)."),
    by: Optional[str] = typer.Option(
        None,
        help="Search concurrency (closed loop) or rate (open loop, requests/s). "
        "Default: concurrency; rate for --workload trace (the trace faster or slower).",
    ),
    start: Optional[float] = typer.Option(
        None, help="First load of the bracket (default 1; a trace's own mean rate for --workload trace)."
    ),
    max_load: Optional[float] = typer.Option(
        None, help="Highest load the bracket tries (default 1024 users or 1000 req/s)."
    ),
    resolution: Optional[float] = typer.Option(
        None,
        help="Stop bisecting when the bracket is this narrow: users for "
        "concurrency (default 1), a fraction for rate (default 0.1 = 10%).",
    ),
    repeats: int = typer.Option(
        3, min=1, help="Measurements of each boundary load (the first included), pooled for the answer's interval."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the search and the answer as JSON on stdout (everything else goes to stderr)."
    ),
    peak_rate: Optional[float] = typer.Option(
        None,
        help="Also say how many replicas this request rate (req/s) "
        "needs, from the capacity per replica (the fleet's / its replicas); "
        "`llmdiag plan --peak-rate` predicts it per balancing policy.",
    ),
    stop_over_capacity: bool = typer.Option(
        True,
        help="Stop an open-loop level early when its queue keeps growing past the TTFT SLO (marked over capacity).",
    ),
    input_len: str = typer.Option("128", help="Prompt length in tokens."),
    output_len: str = typer.Option("64", help="Output length in tokens (max_tokens with ignore_eos)."),
    input_len_spread: float = workload_flags.INPUT_LEN_SPREAD,
    workload: str = workload_flags.WORKLOAD,
    long_len: int = workload_flags.LONG_LEN,
    long_fraction: float = workload_flags.LONG_FRACTION,
    dataset: Optional[Path] = workload_flags.DATASET,
    trace_limit: Optional[int] = workload_flags.TRACE_LIMIT,
    block_size: int = workload_flags.BLOCK_SIZE,
    turns: int = workload_flags.TURNS,
    burstiness: float = typer.Option(1.0, help="--by rate: gamma shape of inter-arrival times (1 = Poisson)."),
    warmup: str = typer.Option(CAPACITY_WARMUP, help="Warm-up per level before measuring."),
    duration: str = typer.Option(CAPACITY_DURATION, help="Measured window per level."),
    request_timeout: str = typer.Option(seconds_text(DEFAULT_REQUEST_TIMEOUT_S), help="Per-request timeout."),
    workers: int = typer.Option(1, help="Locust worker processes (with --master-bind: remote workers to wait for)."),
    master_bind: Optional[str] = typer.Option(None, help="Run the locust master on HOST:PORT for remote workers."),
    target: Optional[str] = target_options.TARGET,
    model: Optional[str] = target_options.MODEL,
    api_key: Optional[str] = target_options.API_KEY,
    endpoint: str = target_options.ENDPOINT,
    ignore_eos: bool = target_options.IGNORE_EOS,
    prompt_format: str = typer.Option("text", help="text or ids (see `llmbench sweep --help`)."),
    strict: bool = typer.Option(False, help="Fail instead of adapting when the preflight finds a refused field."),
    engine_arg: list[str] = typer.Option([], help="Extra flag for the embedded engine, repeatable."),
    server_threads: Optional[int] = typer.Option(None, min=1, help="torch threads of the embedded engine."),
    data_parallel_size: int = target_options.DATA_PARALLEL_SIZE,
    replicas: int = typer.Option(
        1,
        min=1,
        help="Engine replicas behind --target (a load balancer over N engines): "
        "the answer is the fleet's, and also given per replica.",
    ),
    replica_header: str = target_options.REPLICA_HEADER,
    lb_policy: Optional[str] = target_options.LB_POLICY,
    replica_metrics: Optional[str] = target_options.REPLICA_METRICS,
    out: Optional[Path] = typer.Option(None, help="Run directory (default ./runs/<timestamp>-capacity-<model>)."),
    resume: Optional[Path] = typer.Option(
        None,
        help="Continue an interrupted capacity run directory: the search, "
        "SLO, workload and target are the ones in its run.json; the levels it "
        "measured are kept and the search goes on from them.",
    ),
    label: Optional[str] = typer.Option(None, help="Label in the default run directory name."),
    tokenizer: Optional[Path] = typer.Option(None, help="tokenizer.json (or model directory) of the target's model."),
    seed: int = typer.Option(
        0, help="Seed of the workload; each level (and each repeat of one) sends prompts of its own, derived from it."
    ),
    probes: str = typer.Option("default", help="Probes: comma list, 'default', 'all' or 'none'."),
    probe_interval: float = typer.Option(1.0, help="Seconds between probe samples."),
    server_pid: Optional[int] = typer.Option(None, help="PID of a local --target server, for host/stacks probes."),
) -> None:
    """Find the highest load within the SLO: bracket by doubling, bisect, re-measure the boundary; every probe is
    a measured level of a normal run directory (report, compare and `llmdiag p99` work on it)."""
    from llmbench.capacity.run import CapacityArgs, run_capacity
    from llmbench.sweep.setup.args import SweepArgs

    if peak_rate is not None and not peak_rate > 0:
        raise typer.BadParameter(f"a request rate is > 0 req/s, got {peak_rate:g}", param_hint="--peak-rate")
    values = dict(locals())
    console = make_console(stderr=json_out)
    values.update(
        concurrency=None,
        request_rate=None,
        label=label or f"capacity-{model or ('tiny' if target is None else 'target')}",
    )
    args = SweepArgs(**{k: v for k, v in values.items() if k in SweepArgs.__dataclass_fields__})
    c = CapacityArgs(
        by=by,
        start=start,
        max_load=max_load,
        resolution=resolution,
        repeats=repeats,
        json_out=json_out,
        stop_over_capacity=stop_over_capacity,
        peak_rate=peak_rate,
    )
    run_capacity(args, c, console)
