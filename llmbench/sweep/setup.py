"""From `llmbench sweep`'s options to a running sweep: validate everything, create (or resume) the
run directory, start the target, record its facts, run the levels.

Every check that can fail on user input runs before the run directory is created, so a typo
costs a one-line error and leaves nothing behind stuck at `running`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from llmbench.cli_common import terminate_as_interrupt
from llmbench.options.parse import parse_duration, parse_list
from llmbench.options.target import lb_policy, replica_metrics, target_urls
from llmbench.prediction import check_profile_option
from refengine.server.dp_policy import REPLICA_HEADER as FRONT_REPLICA_HEADER
from rundir import RunDir, RunInfo, SloSpec, TargetInfo, WorkloadSpec
from rundir.run_info import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_DURATION_S,
    DEFAULT_TPOT_P95_S,
    DEFAULT_TTFT_P99_S,
    DEFAULT_WARMUP_S,
)

DEFAULT_CONCURRENCY = [1, 8, 32, 64]  # the seed's sweep (docs/yardsticks.md)


@dataclass
class SweepArgs:
    """`llmbench sweep`'s options as typed; the command's signature holds their defaults and help."""

    concurrency: Optional[str]
    request_rate: Optional[str]
    burstiness: float
    input_len: str
    output_len: str
    input_len_spread: float
    workload: str
    long_len: int
    long_fraction: float
    dataset: Optional[Path]
    warmup: Optional[str]  # None: a steady warm-up (docs/metrics.md, "Sizing a level")
    duration: Optional[str]  # None: a window sized for the percentiles it reports
    request_timeout: str
    workers: int
    master_bind: Optional[str]
    target: Optional[str]
    model: Optional[str]
    api_key: Optional[str]
    endpoint: str
    ignore_eos: bool
    engine_arg: list[str]
    server_threads: Optional[int]
    slo_ttft: Optional[float]  # None (all three): the default SLO, recorded as such
    slo_tpot: Optional[float]
    slo_e2e: Optional[float]
    out: Optional[Path]
    label: Optional[str]
    resume: Optional[Path]
    tokenizer: Optional[Path]
    seed: int
    prompt_format: str
    strict: bool
    probes: str
    probe_interval: float
    server_pid: Optional[int]
    trace_speed: float = 1.0  # --workload trace: time scale (2 = twice as fast)
    data_parallel_size: int = 1  # embedded: replicas behind the bundled engine's front
    replica_header: str = FRONT_REPLICA_HEADER  # response header naming the serving replica ('' : none)
    trace_limit: Optional[int] = None  # --workload trace: the first N requests of the trace
    block_size: int = 512  # --workload trace: tokens per hash id (Mooncake: 512)
    # --workload trace: why the trace cycles to fill a level ("--trace-loop", "capacity"); None plays it
    # once, unless --duration is longer than the trace (docs/workloads.md, "Replay")
    trace_loop: Optional[str] = None
    turns: int = 4  # --workload sessions: turns per conversation
    max_duration: Optional[str] = None  # bound of a sized warm-up and window (default DEFAULT_MAX_DURATION_S)
    replicas: int = 1  # engine replicas behind --target (per-replica throughput)
    profile: Optional[str] = None  # a machine profile: each level also predicted (llmbench/prediction.py)
    lb_policy: Optional[str] = None  # over --target's URLs (the client) or the embedded fleet (its front)
    replica_metrics: Optional[str] = None  # each replica's /metrics page (default: each --target URL's own)


def workload_options(
    kind: str,
    dataset: Path | None,
    spread: float,
    target: str | None,
    model: str | None,
    tokenizer: Path | None,
    long_len: int = 4096,
    long_fraction: float = 0.1,
    prompt_format: str = "text",
) -> WorkloadSpec:
    """run.json's workload (loadgen builds the requests from it); token-id prompts must stay inside
    the target's vocabulary."""
    from loadgen.workloads import KINDS, PROMPT_FORMATS

    kind = kind.replace("-", "_")
    if kind not in KINDS:
        raise ValueError(f"--workload must be one of {', '.join(k.replace('_', '-') for k in KINDS)}, got {kind!r}")
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"--prompt-format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    if dataset is not None and not Path(dataset).is_file():
        raise ValueError(f"--dataset {dataset}: no such file")
    if kind == "sharegpt" and dataset is None:
        raise ValueError("--workload sharegpt needs --dataset FILE (a ShareGPT .json or .jsonl file)")
    opts: dict[str, Any] = {
        "kind": kind,
        "prompt_format": prompt_format,
        "input_len_spread": spread,
        "dataset_path": str(dataset) if dataset else None,
        "long_len": long_len,
        "long_fraction": long_fraction,
    }
    tok_path = tokenizer
    if target is None:  # the embedded engine: its own tokenizer tells the vocabulary
        from refengine.model.tiny import resolve_model

        tok_path = resolve_model(model or "tiny")
    if tok_path is not None:
        from tokenizers import Tokenizer

        file = Path(tok_path) / "tokenizer.json" if Path(tok_path).is_dir() else Path(tok_path)
        if not file.is_file():
            raise ValueError(f"no tokenizer.json at {tok_path}")
        opts["vocab_size"] = Tokenizer.from_file(str(file)).get_vocab_size()
        opts["tokenizer"] = str(file)
    elif prompt_format == "ids":
        raise ValueError(
            "--prompt-format ids needs --tokenizer (the target's tokenizer.json or model directory): "
            "token ids must come from the target's own vocabulary"
        )
    return WorkloadSpec().updated(**opts)


def _trace_or_sessions(spec, a: SweepArgs) -> None:
    """A trace is one open-loop level at the trace's own times (llmbench.sweep.trace_level); sessions
    take their turn count."""
    from llmbench.sweep.trace_level import trace_level

    kind = spec.workload.kind
    if kind == "sessions":
        spec.workload = spec.workload.updated(turns=a.turns)
    if kind != "trace":
        if a.trace_loop is not None:
            raise ValueError("--trace-loop cycles a trace: it needs --workload trace")
        return
    trace_level(spec, a)


def _slos(a: SweepArgs) -> SloSpec:
    """The user's SLO; with none of --slo-ttft/--slo-tpot/--slo-e2e given, the defaults, marked as such."""
    default = a.slo_ttft is None and a.slo_tpot is None and a.slo_e2e is None
    try:
        return SloSpec(
            ttft_p99_s=DEFAULT_TTFT_P99_S if a.slo_ttft is None else a.slo_ttft,
            tpot_p95_s=DEFAULT_TPOT_P95_S if a.slo_tpot is None else a.slo_tpot,
            e2e_p99_s=a.slo_e2e,
            default=default,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo-ttft/--slo-tpot/--slo-e2e") from None


def _timeline(a: SweepArgs) -> dict:
    """SweepInfo's durations and sizing: --warmup and --duration given fix the warm-up and the
    window; left out, each is sized (at least the default, at most --max-duration), the window for
    the P99 the tables report (MIN_SAMPLES_FOR_P99, the rule that flags a P99 from fewer)."""
    from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99

    steady, sized = a.warmup is None, a.duration is None
    if not (steady or sized) and a.max_duration is not None:
        raise ValueError(
            "--max-duration bounds a sized warm-up or window: with both --warmup and --duration given, nothing is sized"
        )
    max_s = parse_duration(a.max_duration, "--max-duration") if a.max_duration is not None else DEFAULT_MAX_DURATION_S
    return {
        "warmup_s": DEFAULT_WARMUP_S if a.warmup is None else parse_duration(a.warmup, "--warmup"),
        "duration_s": DEFAULT_DURATION_S if a.duration is None else parse_duration(a.duration, "--duration"),
        "steady_warmup": steady,
        "sample_target": MIN_SAMPLES_FOR_P99 if sized else None,
        "max_duration_s": max_s if steady or sized else None,
    }


def _new_run(a: SweepArgs, console: Console) -> tuple[RunDir, RunInfo]:
    from llmbench.sweep.run import default_run_dir, new_run_info
    from llmbench.sweep.spec import SweepSpec

    urls = target_urls(a.target)  # several: replicas the client balances over; the first is asked first
    a = replace(a, target=urls[0] if urls else None)
    slos = _slos(a)
    try:
        spec = SweepSpec(
            concurrency=parse_list(a.concurrency, int, "--concurrency")
            or ([] if a.request_rate or a.workload == "trace" else DEFAULT_CONCURRENCY),
            request_rate=parse_list(a.request_rate, float, "--request-rate")
            or ([1.0] if a.workload == "trace" and not a.concurrency else []),
            burstiness=a.burstiness,
            input_lens=parse_list(a.input_len, int, "--input-len"),
            output_lens=parse_list(a.output_len, int, "--output-len"),
            **_timeline(a),
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
        _trace_or_sessions(spec, a)
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


def _resumed_run(path: Path, console: Console) -> tuple[RunDir, RunInfo]:
    from llmbench.sweep.spec import SweepSpec

    run = RunDir(path)
    if not run.exists():
        raise typer.BadParameter(f"{path} is not a run directory (no run.json)", param_hint="--resume")
    info = run.read_info()
    info.sweep = SweepSpec.of(info.sweep)
    if info.sweep.workload.kind == "trace" and "trace_loop" not in info.sweep.workload.recorded:
        # Recorded before a trace played once by default (no trace_loop key): it cycled, and goes on so.
        info.sweep.workload = info.sweep.workload.updated(trace_loop="--trace-loop")
    # A capacity search decides its levels as it goes: there is no total to count against.
    total = "" if info.sweep.is_capacity_search() else f" of {len(info.sweep.levels())}"
    console.print(f"resuming {path}: {len(info.levels_done)}{total} levels done")
    return run, info


def prepare_run(a: SweepArgs, console: Console) -> tuple[RunDir, RunInfo, list[str]]:
    """Validate the options, then create the run directory (or open the one to resume)."""
    from probes.registry import parse_probe_list

    try:
        probe_names = parse_probe_list(a.probes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--probes") from None
    if a.probe_interval <= 0:
        raise typer.BadParameter("must be > 0 seconds", param_hint="--probe-interval")
    check_profile_option(a.profile)
    run, info = _resumed_run(a.resume, console) if a.resume is not None else _new_run(a, console)
    return run, info, probe_names


def execute_sweep(
    run: RunDir, info: RunInfo, a: SweepArgs, probe_names: list[str], console: Console, plan_factory=None
) -> None:
    """Start the target (embedded) or use it (external), record its facts, run the levels with probes.
    plan_factory(run, info) -> a LevelPlan (llmbench.sweep.run) chooses the levels instead of the grid.
    Ctrl-C and SIGTERM stop it in order (exit 130); the run directory is marked interrupted."""
    try:
        with terminate_as_interrupt():
            _serve_and_sweep(run, info, a, probe_names, console, plan_factory)
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    except RuntimeError as exc:  # TargetError, SweepStopped, a level that could not run
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=getattr(exc, "exit_code", 1)) from None
    console.print(f"run directory: [bold]{run.path}[/]")


def _serve_and_sweep(
    run: RunDir, info: RunInfo, a: SweepArgs, probe_names: list[str], console: Console, plan_factory
) -> None:
    from llmbench.sweep.embedded import EmbeddedServer
    from llmbench.sweep.run import run_sweep
    from llmbench.sweep.spec import spec_of
    from llmbench.sweep.target import prepare_target
    from probes.runner import sweep_probe_set

    target = info.target
    server = None
    try:
        if target.kind == "embedded":
            if target.model is None:  # (the setup always names one: --model, or tiny)
                raise RuntimeError("run.json names no model for the bundled engine")
            server = EmbeddedServer(
                target.model,
                target.engine_args,
                threads=target.server_threads,
                data_parallel_size=target.replicas,
                lb_policy=target.lb_policy,
            )
            with console.status(f"starting the bundled engine ({target.model}) on {server.url} ..."):
                server.start()
            url = server.url
        else:
            if target.url is None:  # (an external target is its --target URL)
                raise RuntimeError("run.json names no URL for the target")
            url = target.url
        tspec = prepare_target(run, info, url, a.api_key, a.strict, console)
        _record_engine_facts(run, url, a.api_key)
        alive = server.alive if server else (lambda: answers(url))
        pid = (
            server.proc.pid
            if server is not None and server.proc is not None
            else (a.server_pid or _local_server_pid(url, probe_names, console))
        )  # (a started server has its proc)
        others = _local_replica_pids(list(target.urls[1:]), probe_names, console) if server is None else []
        probe_set = sweep_probe_set(
            probe_names,
            run.path,
            url,
            pid,
            a.probe_interval,
            replica_metrics=list(target.replica_metrics),
            replica_pids=others,
            log=lambda m: console.print(m, style="yellow", highlight=False, markup=False),
        )
        run_sweep(
            spec_of(info),
            run,
            tspec,
            console,
            target_alive=alive,
            slos=info.slos,
            master_bind=a.master_bind,
            probes=probe_set,
            plan=plan_factory(run, info) if plan_factory else None,
            profile=a.profile,
        )
    finally:
        if server is not None:
            server.stop()


def _local_server_pid(url: str, probe_names: list[str], console) -> int | None:
    """The pid listening on a local target's port, for the host and stacks probes (probes/local_server.py)."""
    if not {"host", "stacks"} & set(probe_names):
        return None
    from probes.local_server import listening_pid

    pid = listening_pid(url)
    if pid is not None:
        console.print(
            f"the target's server process: pid {pid} (listening on its port); give --server-pid to name another",
            highlight=False,
        )
    return pid


def _local_replica_pids(urls: list[str], probe_names: list[str], console) -> list[int]:
    """The processes listening on the other replicas' ports of a fleet driven directly (the first
    URL's is the server pid): the host probe counts their CPU as the server's, not a neighbour's."""
    if not urls or "host" not in probe_names:
        return []
    from probes.local_server import listening_pid

    pids = [pid for pid in (listening_pid(u) for u in urls) if pid is not None]
    if pids:
        console.print(
            f"the other replicas' server processes: pids {', '.join(map(str, pids))} (listening on their "
            "ports): their CPU is the server's",
            highlight=False,
        )
    return pids


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether something still accepts connections at the target's address."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(url)
    try:
        with socket.create_connection(
            (u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80)), timeout=timeout_s
        ):
            return True
    except OSError:
        return False


def _record_engine_facts(run: RunDir, url: str, api_key: str | None) -> None:
    """The target's own account of its config (KV blocks, precision policy) into run.json."""
    from llmbench.sweep.target_facts import engine_facts

    facts = engine_facts(url, api_key)
    if facts:
        info = run.read_info()
        info.target.engine_facts = facts
        run.write_info(info)
