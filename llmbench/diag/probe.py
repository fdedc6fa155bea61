"""`llmdiag probe`, `llmdiag comm`, `llmdiag pcap`: probes without a sweep, collective bandwidth,
and the TCP health of a packet capture. Registered on the llmdiag app by llmbench/diag_cli.py."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Optional

import typer

from llmbench.cli_common import err_console, make_console, terminate_as_interrupt, user_errors
from reports.grid import Column, Grid, print_grid

console = make_console()


@contextlib.contextmanager
def clean_errors():
    """User mistakes (bad option values, unreadable input files) as one line, exit 2."""
    from probes.base import ProbeInputError

    with user_errors():
        try:
            yield
        except (ProbeInputError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(code=2) from None


def probe(
    probes: str = typer.Option(
        "default",
        help="Comma list of gpu, server, host, irq, tcp, capture, stacks; "
        "'default' (gpu,server,host,irq,tcp), 'all' or 'none'.",
    ),
    duration: str = typer.Option("60s", help="How long to record, e.g. 60s, 5m."),
    out: Path = typer.Option(..., help="Run directory to create; analyzers and reports read it like a sweep's."),
    target: Optional[str] = typer.Option(
        None, help="Base URL of the server being observed (server, tcp, capture probes), e.g. http://127.0.0.1:8000."
    ),
    pid: Optional[int] = typer.Option(None, help="PID of the local server process (host and stacks probes)."),
    replica_metrics: Optional[str] = typer.Option(
        None,
        help="A fleet behind the --target router: each replica's own /metrics page, comma-separated in "
        "replica order (a URL ending in /metrics, or a base URL). The server probe reads each and records "
        "per_engine (key i: the i-th page) beside the fleet's sums, as `llmbench sweep --replica-metrics`.",
    ),
    interval: float = typer.Option(1.0, help="Seconds between samples (stacks dumps every 5 s regardless)."),
    capture_port: Optional[int] = typer.Option(None, help="TCP port to capture (default: the target's port)."),
    capture_iface: Optional[str] = typer.Option(
        None, help="Interface to capture on (default lo for a loopback target)."
    ),
    capture_max_packets: int = typer.Option(20000, help="Stop capturing after this many packets."),
    stacks_record: bool = typer.Option(False, help="Also run `py-spy record` into probes/stacks.speedscope.json."),
) -> None:
    """Record probes alone (for a server someone else is loading) into a run directory."""
    import sys

    from llmbench.options.parse import parse_duration
    from llmbench.options.target import metrics_page
    from llmbench.options.target import replica_metrics as replica_pages
    from llmbench.sweep.run import host_facts
    from probes.base import ProbeContext
    from probes.registry import parse_probe_list
    from probes.runner import ProbeSet
    from rundir import RunDir, RunInfo, SloSpec, SweepInfo, TargetInfo

    with clean_errors():
        names = parse_probe_list(probes)
        seconds = parse_duration(duration, "--duration")
        if interval <= 0:
            raise ValueError("--interval must be > 0 seconds")
        # One page per replica by definition here (no --target URLs to count them against).
        listed = len(replica_metrics.split(",")) if replica_metrics else 0
        pages = replica_pages(replica_metrics, [target] if target else [], listed) if replica_metrics else []
        if target and metrics_page(target) in pages:
            raise ValueError("--replica-metrics lists the --target's own page: give the replicas' pages behind it")
        run = RunDir(out)
        if run.path.exists():
            raise ValueError(f"{run.path} exists; choose another --out")
        info = RunInfo(
            run_id=run.path.name,
            command=sys.argv,
            target=TargetInfo(
                url=target, model=None, kind="external", pid=pid, replicas=len(pages) or 1, replica_metrics=pages
            ),
            sweep=SweepInfo(probe_only=True, duration_s=seconds),
            slos=SloSpec(),
            host=host_facts(),
        )
        run.create(info)
    ctx = ProbeContext(
        out_dir=run.path,
        target_url=target,
        server_pid=pid,
        interval_s=interval,
        capture_port=capture_port,
        capture_iface=capture_iface,
        # The recording's end ends the capture: a duration limit equal to it would
        # fire at the last sample and read as "limit reached" (probes/capture.py).
        capture_max_packets=capture_max_packets,
        capture_max_s=None,
        stacks_record=stacks_record,
        replica_metrics=pages,
    )
    pset = ProbeSet(names, ctx, log=lambda m: console.print(m, style="yellow", highlight=False, markup=False))
    info.probes = pset.start()
    run.write_info(info)
    console.print(
        f"recording {', '.join(n for n, s in info.probes.items() if s == 'ok') or 'nothing'} "
        f"for {seconds:g} s into [bold]{run.path}[/]"
    )
    try:
        with terminate_as_interrupt(), console.status("recording ... (Ctrl-C stops early, keeping what was recorded)"):
            time.sleep(seconds)
        info.status = "complete"
    except KeyboardInterrupt:
        info.status = "interrupted"
    finally:
        stats = pset.stop()
        info.probes = pset.outcome(stats)  # a probe that measured nothing is "failed: ...", not "ok"
        info.finished = time.time()
        if info.status == "running":
            info.status = "interrupted"
        run.write_info(info)
    table = Grid(
        "probes",
        [Column("probe", wrap=False), Column("status")]
        + [Column(c, "right") for c in ("rows", "errors", "CPU % of a core")],
    )
    for name, status in info.probes.items():
        s = stats.get(name)
        table.add_row(
            name,
            status,
            str(s.rows) if s else "—",
            str(s.errors) if s else "—",
            f"{100 * s.cpu_s / s.wall_s:.2f}" if s and s.wall_s else "—",
        )
    print_grid(console, table)


def comm(
    backend: str = typer.Option("gloo", help="gloo (CPU tensors) or nccl (GPU tensors)."),
    ops: str = typer.Option(
        "all_reduce,all_gather,reduce_scatter,all_to_all,sendrecv",
        help="Comma list of all_reduce, all_gather, reduce_scatter, all_to_all, sendrecv.",
    ),
    min_bytes: str = typer.Option("1K", help="Smallest message (nccl-tests -b), e.g. 1K."),
    max_bytes: str = typer.Option("64M", help="Largest message (nccl-tests -e), e.g. 64M."),
    step_factor: int = typer.Option(2, help="Multiply the size by this between steps (nccl-tests -f)."),
    nprocs: int = typer.Option(2, help="Local processes to launch; ignored under torchrun (which sets RANK)."),
    iters: int = typer.Option(20, help="Timed iterations per size."),
    warmup: int = typer.Option(5, help="Untimed iterations per size first."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the rows and plateaus as JSON here."),
) -> None:
    """Collective bandwidth over torch.distributed, with nccl-tests' algbw/busbw definitions."""
    from probes.comm import CommSpec, run_local, run_torchrun, under_torchrun
    from probes.comm_table import parse_size, size_steps

    with clean_errors():
        if step_factor < 2:
            raise ValueError("--step-factor must be >= 2")
        spec = CommSpec(
            backend=backend,
            ops=tuple(o for o in ops.replace(" ", "").split(",") if o),
            sizes=tuple(size_steps(parse_size(min_bytes), parse_size(max_bytes), step_factor)),
            iters=iters,
            warmup=warmup,
        )
        if backend == "nccl":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("--backend nccl needs CUDA GPUs; none is visible here (use --backend gloo)")
    if under_torchrun():
        rank, n, rows = run_torchrun(spec)
        if rows is None:
            return
    else:
        n = nprocs
        with clean_errors():
            if nprocs < 2:
                raise ValueError("--nprocs must be >= 2 (a collective needs two ranks)")
        with console.status(f"running {len(spec.ops)} ops × {len(spec.sizes)} sizes on {n} {backend} ranks ..."):
            rows = run_local(spec, n)
    print_comm_table(rows, n, backend, json_out)


def print_comm_table(rows, n: int, backend: str, json_out: Path | None) -> None:
    from probes.comm_table import human_bytes, plateau

    plateaus = {}
    for op in dict.fromkeys(r.op for r in rows):
        op_rows = [r for r in rows if r.op == op]
        table = Grid(
            f"{op} — {n} ranks, {backend}",
            [Column(col, "right") for col in ("size", "count", "type", "redop", "time", "algbw", "busbw", "skew")],
            box_optional=True,
            caption="size B · count elements · time us (slowest rank) · algbw, busbw GB/s (10^9 B/s) · "
            "skew = slowest / median rank time",
        )
        for r in op_rows:
            med = sorted(r.rank_times_us)[len(r.rank_times_us) // 2]
            strag = f"rank {r.straggler_rank}" if r.straggler_rank is not None else ""
            table.add_row(
                str(r.size_bytes),
                str(r.count),
                r.dtype,
                r.redop,
                f"{r.time_us:.1f}",
                f"{r.algbw_gbs:.3f}",
                f"{r.busbw_gbs:.3f}",
                f"{max(r.rank_times_us) / med:.2f} {strag}".strip(),
            )
        print_grid(console, table)
        plateaus[op] = plateau(op_rows)
        p = plateaus[op]
        console.print(
            f"{op}: large-message plateau busbw {p['busbw_gbs']:.3f} GB/s, reached at "
            f"{human_bytes(p['reached_at_bytes'])}B"
        )
    if json_out is not None:
        from dataclasses import asdict

        json_out.write_text(
            json.dumps(
                {"ranks": n, "backend": backend, "rows": [asdict(r) for r in rows], "plateau": plateaus}, indent=2
            )
        )


def pcap(
    file: Path = typer.Argument(..., help="A classic pcap file (e.g. probes/capture.pcap of a run)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
    top: int = typer.Option(20, help="Flows to list, worst first."),
) -> None:
    """Retransmissions, duplicate ACKs and zero windows per TCP flow, as Wireshark defines them."""
    from probes.pcap_analysis import analyze_pcap

    with clean_errors():
        if not file.is_file():
            raise ValueError(f"{file}: no such file")
        report = analyze_pcap(str(file))
    if json_out:
        console.print_json(json.dumps(report.to_dict()))
        return
    # A flow ("10.0.0.1:443 <-> 10.0.0.2:51234") wraps only at its spaces: no address is split.
    table = Grid(
        f"{file} — {report.tcp_packets} TCP packets in {len(report.flows)} flows",
        [Column("flow")]
        + [Column(col, "right") for col in ("pkts", "data", "retr", "fast", "spur", "dupack", "0win", "kalive")],
        dense=True,
    )
    for f in report.flows[:top]:
        table.add_row(
            f.flow,
            str(f.packets),
            str(f.data_packets),
            str(f.retransmissions),
            str(f.fast_retransmissions),
            str(f.spurious_retransmissions),
            str(f.dup_acks),
            str(f.zero_windows),
            str(f.keepalives),
        )
    print_grid(console, table)
    console.print(
        "[dim]retr = retransmissions (fast / spurious among them), dupack = duplicate ACKs, 0win = zero "
        "windows, kalive = keep-alives (Wireshark's definitions)[/]"
    )
    t = report.totals()
    console.print(
        f"total: {t['retransmissions']} retransmissions ({t['fast_retransmissions']} fast, "
        f"{t['spurious_retransmissions']} spurious), {t['dup_acks']} duplicate ACKs, "
        f"{t['zero_windows']} zero windows; {report.capture_duplicates} capture duplicates dropped"
    )
    if report.truncated:
        err_console.print(
            f"[yellow]warning:[/] the file is truncated: {report.truncated}; "
            f"results cover the {report.packets_read} packets before it",
            highlight=False,
        )
