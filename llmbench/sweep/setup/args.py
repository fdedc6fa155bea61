"""`llmbench sweep`'s options as typed (SweepArgs): what the command (and `llmbench capacity`) hands
to the setup; the commands' signatures hold the defaults and the help."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from refengine.server.dp_policy import REPLICA_HEADER as FRONT_REPLICA_HEADER


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
