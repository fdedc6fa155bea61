"""`llmbench sweep`: option parsing and wiring (target, run directory, resume) around llmbench.sweep."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

console = Console()


def parse_list(text: str | None, kind=int, name: str = "value") -> list:
    if not text:
        return []
    try:
        return [kind(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter(f"{name} must be a comma-separated list of numbers, got {text!r}") from None


def parse_duration(text: str, name: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", text)
    if not m:
        raise typer.BadParameter(f"{name} must look like 30, 30s, 3m or 1h, got {text!r}")
    return float(m.group(1)) * {"ms": 0.001, None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def _workload_options(kind: str, dataset: Path | None, spread: float, target: str | None, model: str | None,
                      tokenizer: Path | None, long_len: int = 4096, long_fraction: float = 0.1) -> dict:
    """Workload options for loadgen; random token ids must stay inside the target's vocabulary."""
    kind = kind.replace("-", "_")
    opts = {"kind": kind, "input_len_spread": spread, "dataset_path": str(dataset) if dataset else None,
            "long_len": long_len, "long_fraction": long_fraction}
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
    return opts


def sweep(
    concurrency: Optional[str] = typer.Option(None, help="Closed-loop levels: that many users each sending back to "
                                              "back, e.g. 1,8,32,64 (default when no --request-rate)."),
    request_rate: Optional[str] = typer.Option(None, help="Open-loop levels in requests/s with Poisson arrivals, "
                                               "e.g. 1,2,4 (instead of --concurrency)."),
    burstiness: float = typer.Option(1.0, help="Open loop: gamma shape of inter-arrival times (1 = Poisson, "
                                     "< 1 burstier)."),
    input_len: str = typer.Option("128", help="Prompt lengths in tokens, one level set each, e.g. 512,2048,4096."),
    output_len: str = typer.Option("64", help="Output lengths in tokens (max_tokens with ignore_eos)."),
    input_len_spread: float = typer.Option(0.0, help="Prompt lengths drawn uniformly within ±this fraction."),
    workload: str = typer.Option("random", help="random | sharegpt | shared-prefix | mixed."),
    long_len: int = typer.Option(4096, min=1, help="--workload mixed: prompt length of the long requests (the short "
                                 "ones use --input-len)."),
    long_fraction: float = typer.Option(0.1, min=0.0, max=1.0, help="--workload mixed: share of long requests."),
    dataset: Optional[Path] = typer.Option(None, help="ShareGPT JSON/JSONL file for --workload sharegpt."),
    warmup: str = typer.Option("5s", help="Warm-up per level before measuring."),
    duration: str = typer.Option("20s", help="Measured window per level. Production runs want >= 3m."),
    request_timeout: str = typer.Option("3m", help="Per-request timeout (connect + whole stream)."),
    workers: int = typer.Option(1, help="Locust worker processes on this machine (one drives ~1,000 streams/s); "
                                "with --master-bind, the number of remote workers to wait for."),
    master_bind: Optional[str] = typer.Option(None, help="Run the locust master on HOST:PORT and wait for --workers "
                                              "workers started elsewhere with `llmbench worker --master-host`."),
    target: Optional[str] = typer.Option(None, help="Base URL of an OpenAI-compatible server; default: start the "
                                         "bundled engine on a free loopback port."),
    model: Optional[str] = typer.Option(None, help="Model name to send (--target) or to serve (embedded, "
                                        "default tiny)."),
    api_key: Optional[str] = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token for --target."),
    endpoint: str = typer.Option("completions", help="completions (token-id prompts) or chat."),
    ignore_eos: bool = typer.Option(True, help="Send ignore_eos so outputs have the requested length; turn off "
                                    "for servers that reject it."),
    engine_arg: list[str] = typer.Option([], help="Extra flag for the embedded engine, repeatable, e.g. "
                                         "--engine-arg=--max-num-seqs=32."),
    server_threads: Optional[int] = typer.Option(None, min=1, help="torch threads of the embedded engine (default: one per "
                                                 "core; see docs/cli.md for the trade-off when the client shares them)."),
    slo_ttft: float = typer.Option(1.5, help="SLO: TTFT P99 in seconds."),
    slo_tpot: float = typer.Option(0.050, help="SLO: TPOT P95 in seconds."),
    slo_e2e: Optional[float] = typer.Option(None, help="SLO: E2E P99 in seconds (default: none)."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default ./runs/<timestamp>-<label>)."),
    label: Optional[str] = typer.Option(None, help="Label in the default run directory name."),
    resume: Optional[Path] = typer.Option(None, help="Continue an interrupted run directory at its first "
                                          "unfinished level (same spec)."),
    tokenizer: Optional[Path] = typer.Option(None, help="tokenizer.json (or its directory) of the target's model: "
                                             "token-id range of random prompts, ShareGPT lengths, and the client's "
                                             "count of output tokens (default for the embedded engine: its own)."),
    seed: int = typer.Option(0, help="Seed of the workload."),
    probes: str = typer.Option("default", help="Probes sampled during the sweep: comma list of gpu, server, host, "
                               "irq, tcp, capture, stacks; 'default' (gpu,server,host,irq,tcp), 'all' or 'none'."),
    probe_interval: float = typer.Option(1.0, help="Seconds between probe samples."),
    server_pid: Optional[int] = typer.Option(None, help="PID of a local --target server, for the host and stacks "
                                             "probes (the embedded engine's is known)."),
) -> None:
    """Sweep load levels against a server and write a run directory with per-request records and a summary."""
    from llmbench.embedded import EmbeddedServer
    from llmbench.rundir import RunDir
    from llmbench.sweep import SweepSpec, default_run_dir, new_run_info, run_sweep
    from loadgen.level import TargetSpec

    slos = {"ttft_p99_s": slo_ttft, "tpot_p95_s": slo_tpot}
    if slo_e2e is not None:
        slos["e2e_p99_s"] = slo_e2e
    from probes.registry import parse_probe_list

    try:
        probe_names = parse_probe_list(probes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--probes") from None
    if probe_interval <= 0:
        raise typer.BadParameter("must be > 0 seconds", param_hint="--probe-interval")
    if resume is not None:
        run = RunDir(resume)
        if not run.exists():
            raise typer.BadParameter(f"{resume} is not a run directory (no run.json)", param_hint="--resume")
        info = run.read_info()
        spec = SweepSpec(**info.sweep)
        target_info = info.target
        slos = info.slos
        console.print(f"resuming {resume}: {len(info.levels_done)} of {len(spec.levels())} levels done")
    else:
        try:
            spec = SweepSpec(
                concurrency=parse_list(concurrency, int, "--concurrency") or ([] if request_rate else [1, 8, 32, 64]),
                request_rate=parse_list(request_rate, float, "--request-rate"), burstiness=burstiness,
                input_lens=parse_list(input_len, int, "--input-len"), output_lens=parse_list(output_len, int, "--output-len"),
                warmup_s=parse_duration(warmup, "--warmup"), duration_s=parse_duration(duration, "--duration"),
                request_timeout_s=parse_duration(request_timeout, "--request-timeout"), workers=workers,
                workload=_workload_options(workload, dataset, input_len_spread, target, model, tokenizer,
                                           long_len, long_fraction),
                seed=seed)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        kind = "external" if target else "embedded"
        target_info = {"url": target, "model": model or ("tiny" if not target else None), "kind": kind,
                       "endpoint": endpoint, "ignore_eos": ignore_eos, "engine_args": list(engine_arg),
                       "server_threads": server_threads}
        if kind == "external" and not model:
            raise typer.BadParameter("--model is required with --target (the name the server serves)")
        run = RunDir(out or default_run_dir(label or (target_info["model"] or "run")))
        if run.path.exists():
            raise typer.BadParameter(f"{run.path} exists; choose another --out or --resume it")
        run.create(new_run_info(run.path.name, spec, target_info, slos))
        console.print(f"run directory: [bold]{run.path}[/]")

    server = None
    try:
        if target_info["kind"] == "embedded":
            server = EmbeddedServer(target_info["model"], target_info.get("engine_args"),
                                    threads=target_info.get("server_threads"))
            with console.status(f"starting the bundled engine ({target_info['model']}) on {server.url} ..."):
                server.start()
            url = server.url
        else:
            url = target_info["url"]
        tspec = TargetSpec(url=url, model=target_info["model"], api_key=api_key, endpoint=target_info["endpoint"],
                           send_ignore_eos=target_info["ignore_eos"])
        _record_engine_facts(run, url, api_key)
        alive = server.alive if server else (lambda: True)
        from probes.runner import sweep_probe_set

        probe_set = sweep_probe_set(probe_names, run.path, url, server.proc.pid if server else server_pid,
                                    probe_interval,
                                    log=lambda m: console.print(m, style="yellow", highlight=False, markup=False))
        run_sweep(spec, run, tspec, console, target_alive=alive, slos=slos, master_bind=master_bind,
                  probes=probe_set)
    except KeyboardInterrupt:
        raise typer.Exit(code=130)
    except RuntimeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(code=1)
    finally:
        if server is not None:
            server.stop()
    console.print(f"run directory: [bold]{run.path}[/]")


def _record_engine_facts(run, url: str, api_key: str | None) -> None:
    """The target's own account of its config (KV blocks, precision policy) into run.json."""
    from llmbench.target_facts import engine_facts

    facts = engine_facts(url, api_key)
    if facts:
        info = run.read_info()
        info.target["engine_facts"] = facts
        run.write_info(info)


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
