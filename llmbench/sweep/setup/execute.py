"""The sweep run: the target started (the bundled engine) or used (an external one), its facts recorded,
the probes around the levels; Ctrl-C and SIGTERM end it in order, a target's refusal in one line."""

from __future__ import annotations

import typer
from rich.console import Console

from llmbench.cli_common import terminate_as_interrupt
from llmbench.sweep.setup.args import SweepArgs
from llmbench.sweep.setup.server_pids import local_replica_pids, local_server_pid
from rundir import RunDir, RunInfo


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
            else (a.server_pid or local_server_pid(url, probe_names, console))
        )  # (a started server has its proc)
        others = local_replica_pids(list(target.urls), probe_names, console) if server is None else {}
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
