"""`llmbench sweep` and `llmbench worker`: the options; llmbench.sweep.setup turns them into a run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from llmbench.cli_common import make_console
from llmbench.options import profile as profile_options
from llmbench.options import target as target_options
from llmbench.options import workload as workload_flags
from llmbench.options.parse import seconds_text
from rundir.run_info import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_DURATION_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_TPOT_P95_S,
    DEFAULT_TTFT_P99_S,
    DEFAULT_WARMUP_S,
)

console = make_console()


def sweep(
    concurrency: Optional[str] = typer.Option(
        None,
        help="Closed-loop levels: that many users each sending back to "
        "back, e.g. 1,8,32,64 (default when no --request-rate).",
    ),
    request_rate: Optional[str] = typer.Option(
        None, help="Open-loop levels in requests/s with Poisson arrivals, e.g. 1,2,4 (instead of --concurrency)."
    ),
    burstiness: float = typer.Option(
        1.0, help="Open loop: gamma shape of inter-arrival times (1 = Poisson, < 1 burstier)."
    ),
    input_len: str = typer.Option("128", help="Prompt lengths in tokens, one level set each, e.g. 512,2048,4096."),
    output_len: str = typer.Option("64", help="Output lengths in tokens (max_tokens with ignore_eos)."),
    input_len_spread: float = workload_flags.INPUT_LEN_SPREAD,
    workload: str = workload_flags.WORKLOAD,
    long_len: int = workload_flags.LONG_LEN,
    long_fraction: float = workload_flags.LONG_FRACTION,
    dataset: Optional[Path] = workload_flags.DATASET,
    trace_speed: float = typer.Option(1.0, help="--workload trace: time scale (2 sends the trace twice as fast)."),
    trace_limit: Optional[int] = workload_flags.TRACE_LIMIT,
    trace_loop: bool = typer.Option(
        False,
        "--trace-loop",
        help="--workload trace: cycle the trace to fill the level "
        f"(--warmup + --duration, default {seconds_text(DEFAULT_WARMUP_S)} + "
        f"{seconds_text(DEFAULT_DURATION_S)}). Default: play it once, the level lasting "
        "its span (a --duration longer than the trace cycles it too).",
    ),
    block_size: int = workload_flags.BLOCK_SIZE,
    turns: int = workload_flags.TURNS,
    warmup: Optional[str] = typer.Option(
        None,
        help=f"Warm-up per level before measuring (default: at least "
        f"{seconds_text(DEFAULT_WARMUP_S)} and until every user has finished a "
        "request, at most --max-duration; none for a trace played once).",
    ),
    duration: Optional[str] = typer.Option(
        None,
        help=f"Measured window per level (default: at least "
        f"{seconds_text(DEFAULT_DURATION_S)} and until it holds "
        f"{MIN_SAMPLES_FOR_P99} requests, enough for a P99, at most "
        "--max-duration; a trace's span for a trace played once). Production runs "
        "want >= 3m.",
    ),
    max_duration: Optional[str] = typer.Option(
        None,
        help=f"Bound of a sized warm-up and of a sized window, each (default {seconds_text(DEFAULT_MAX_DURATION_S)}).",
    ),
    request_timeout: str = typer.Option(
        seconds_text(DEFAULT_REQUEST_TIMEOUT_S), help="Per-request timeout (connect + whole stream)."
    ),
    workers: int = typer.Option(
        1,
        help="Locust worker processes on this machine (one drives ~1,000 streams/s); "
        "with --master-bind, the number of remote workers to wait for.",
    ),
    master_bind: Optional[str] = typer.Option(
        None,
        help="Run the locust master on HOST:PORT and wait for --workers "
        "workers started elsewhere with `llmbench worker --master-host`.",
    ),
    target: Optional[str] = target_options.TARGET,
    model: Optional[str] = target_options.MODEL,
    api_key: Optional[str] = target_options.API_KEY,
    replicas: int = typer.Option(
        1,
        min=1,
        help="Engine replicas behind --target (a load balancer over N engines): "
        "recorded in run.json, per-replica throughput in `llmbench report --runs` divides "
        "by it.",
    ),
    endpoint: str = target_options.ENDPOINT,
    ignore_eos: bool = target_options.IGNORE_EOS,
    prompt_format: str = typer.Option(
        "text",
        help="text (any OpenAI-compatible server; sized to --input-len with "
        "the target's tokenizer or calibrated against the server's own token count) "
        "or ids (token ids from --tokenizer's vocabulary; vLLM, SGLang, refengine).",
    ),
    strict: bool = typer.Option(
        False,
        help="Fail instead of adapting when the preflight finds the target refuses "
        "part of the request (a field, the prompt format).",
    ),
    engine_arg: list[str] = typer.Option(
        [], help="Extra flag for the embedded engine, repeatable, e.g. --engine-arg=--max-num-seqs=32."
    ),
    server_threads: Optional[int] = typer.Option(
        None,
        min=1,
        help="torch threads of the embedded engine (default: one per "
        "core; see docs/cli.md for the trade-off when the client shares them).",
    ),
    data_parallel_size: int = target_options.DATA_PARALLEL_SIZE,
    replica_header: str = target_options.REPLICA_HEADER,
    lb_policy: Optional[str] = target_options.LB_POLICY,
    replica_metrics: Optional[str] = target_options.REPLICA_METRICS,
    slo_ttft: Optional[float] = typer.Option(
        None,
        help=f"SLO: TTFT P99 in seconds (default {DEFAULT_TTFT_P99_S:g}, "
        "a GPU server's; without any --slo-* the answer leads with what each "
        "level meets).",
    ),
    slo_tpot: Optional[float] = typer.Option(None, help=f"SLO: TPOT P95 in seconds (default {DEFAULT_TPOT_P95_S:g})."),
    slo_e2e: Optional[float] = typer.Option(None, help="SLO: E2E P99 in seconds (default: none)."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default ./runs/<timestamp>-<label>)."),
    label: Optional[str] = typer.Option(None, help="Label in the default run directory name."),
    resume: Optional[Path] = typer.Option(
        None, help="Continue an interrupted run directory at its first unfinished level (same spec)."
    ),
    tokenizer: Optional[Path] = typer.Option(
        None,
        help="tokenizer.json (or a Hugging Face model directory) of the "
        "target's model: exact prompt sizing, the token-id range of --prompt-format "
        "ids, ShareGPT lengths, and the client's count of output tokens (default for "
        "the embedded engine: its own; without it text prompts are calibrated "
        "against the server).",
    ),
    seed: int = typer.Option(
        0, help="Seed of the workload; each level sends prompts of its own, derived from it and the level id."
    ),
    probes: str = typer.Option(
        "default",
        help="Probes sampled during the sweep: comma list of gpu, server, host, "
        "irq, tcp, capture, stacks; 'default' (gpu,server,host,irq,tcp), 'all' or 'none'.",
    ),
    probe_interval: float = typer.Option(1.0, help="Seconds between probe samples."),
    server_pid: Optional[int] = typer.Option(
        None,
        help="PID of a local --target server, for the host and stacks "
        "probes (default: the process listening on a local target's port; "
        "the embedded engine's is known).",
    ),
    profile: Optional[str] = profile_options.PROFILE,
) -> None:
    """Sweep load levels against a server and write a run directory with per-request records and a summary."""
    from llmbench.sweep.setup.args import SweepArgs
    from llmbench.sweep.setup.execute import execute_sweep
    from llmbench.sweep.setup.prepare import prepare_run

    args = SweepArgs(**{k: v for k, v in locals().items() if k in SweepArgs.__dataclass_fields__})
    args.trace_loop = "--trace-loop" if trace_loop else None
    run, info, probe_names = prepare_run(args, console)
    if resume is not None and info.sweep.is_capacity_search():  # its levels come from a search, not a grid
        raise typer.BadParameter(
            f"{resume} is a capacity search: continue it with `llmbench capacity --resume {resume}`",
            param_hint="--resume",
        )
    execute_sweep(run, info, args, probe_names, console)


def worker(
    master_host: str = typer.Option(..., help="Address of the machine running `llmbench sweep --master-bind`."),
    port: int = typer.Option(5557, help="The master's port."),
    once: bool = typer.Option(False, help="Serve one level, then exit (default: serve levels until stopped)."),
) -> None:
    """Run a load-generator worker for a sweep driven from another machine (locust's distributed mode)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "loadgen.locust_proc", "--worker", "--master-host", master_host, "--port", str(port)]
    raise typer.Exit(code=subprocess.call(cmd + (["--once"] if once else [])))
