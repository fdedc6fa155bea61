"""Command line of the server: `python -m refengine.server` and `llmbench serve` share it.

Engine flags are generated from `EngineArgs` (vLLM's spelling: --max-num-seqs, --no-enable-prefix-caching),
so adding an engine argument adds its flag and help text in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys

import uvicorn

from refengine.config import EngineArgs
from refengine.errors import RefEngineError
from refengine.gc_heap import freeze_startup_heap
from refengine.server.dp_policy import DEFAULT_LB_POLICY, LB_POLICIES
from refengine.server.uvicorn_impl import (
    EVENT_LOOPS,
    HTTP_IMPLEMENTATIONS,
    event_loop,
    http_protocol_class,
    implementations_in_use,
)


def _base_type(annotation):
    """'int | None' → int; dataclass annotations are strings under `from __future__ import annotations`."""
    text = str(annotation)
    for name, typ in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if text.startswith(name):
            return typ
    return str


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine arguments (vLLM names)")
    for f in dataclasses.fields(EngineArgs):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        typ = _base_type(f.type)
        if typ is bool:
            group.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=f.default,
                help=help_text + " (default: %(default)s)",
            )
        else:
            group.add_argument(
                flag,
                type=typ,
                default=f.default,
                metavar=f.name.upper(),
                help=help_text + (" (default: %(default)s)" if f.default is not None else ""),
            )


def build_parser(prog: str = "refengine-serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Serve the reference engine over an OpenAI-compatible HTTP API with Prometheus /metrics."
    )
    p.add_argument("model_positional", nargs="?", metavar="MODEL", help="Same as --model.")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="Address to bind. Loopback by default; binding another "
        "address (e.g. 0.0.0.0) exposes the server and must be asked for explicitly.",
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: %(default)s).")
    p.add_argument("--api-key", default=None, help="Require 'Authorization: Bearer KEY' on /v1 routes.")
    p.add_argument(
        "--served-model-name",
        default=None,
        help="Model name clients send and metrics carry (default: the --model value).",
    )
    p.add_argument(
        "--max-waiting-requests",
        type=int,
        default=1024,
        help="Waiting-queue bound; beyond it new requests get 503 instead of growing memory (default: %(default)s).",
    )
    p.add_argument(
        "--max-request-body-bytes",
        type=int,
        default=32 * 1024 * 1024,
        help="Largest request body; a larger one gets 413 (default: %(default)s, 32 MiB).",
    )
    p.add_argument(
        "--timeout-keep-alive",
        type=float,
        default=5.0,
        help="Close a keep-alive connection idle this "
        "many seconds after a response (uvicorn's option; default: %(default)s).",
    )
    p.add_argument(
        "--timeout-request-header",
        type=float,
        default=10.0,
        help="A connection must complete a "
        "request's headers this many seconds after connecting or after its previous response, or it "
        "is closed (408 if it had sent part of one) (default: %(default)s).",
    )
    p.add_argument(
        "--timeout-request-body",
        type=float,
        default=30.0,
        help="The whole request body must arrive "
        "within this many seconds of its headers, or the request gets 408 (default: %(default)s).",
    )
    p.add_argument(
        "--http",
        default="auto",
        choices=list(HTTP_IMPLEMENTATIONS),
        help="uvicorn's HTTP parser: auto is httptools (C) where installed, else h11 (pure Python, "
        "more of the event loop's CPU per streamed token) (default: %(default)s).",
    )
    p.add_argument(
        "--loop",
        default="auto",
        choices=list(EVENT_LOOPS),
        help="uvicorn's event loop: auto is uvloop where installed, else asyncio (default: %(default)s).",
    )
    p.add_argument(
        "--graceful-shutdown-s",
        type=float,
        default=10.0,
        help="On SIGINT/SIGTERM, how long in-flight "
        "requests may finish before they are aborted (default: %(default)s).",
    )
    p.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        metavar="N",
        help="Serve N replicas of the "
        "engine, each a full server process on its own loopback port, behind one OpenAI-compatible front "
        "on --port that balances requests over them (vLLM's flag; default: %(default)s, no front).",
    )
    p.add_argument(
        "--lb-policy",
        default=DEFAULT_LB_POLICY,
        choices=list(LB_POLICIES),
        help="With "
        "--data-parallel-size > 1: round-robin, or least-outstanding (the replica with the fewest "
        "requests in flight through the front) (default: %(default)s).",
    )
    p.add_argument(
        "--replica-startup-timeout-s",
        type=float,
        default=600.0,
        help="With --data-parallel-size > 1: how long the replicas have to become healthy (default: %(default)s).",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="uvicorn log level (default: %(default)s).",
    )
    add_engine_args(p)
    return p


def engine_args_from(ns: argparse.Namespace) -> EngineArgs:
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(EngineArgs)}
    if ns.model_positional:
        values["model"] = ns.model_positional
    return EngineArgs(**values)


class _GracefulServer(uvicorn.Server):
    """uvicorn.Server that exits 0 after a graceful SIGINT/SIGTERM shutdown.

    uvicorn re-raises the captured signal once it has drained, so the process would die with
    status -15; a server that finished its in-flight requests cleanly should say so with 0.
    """

    def handle_exit(self, sig, frame):
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for streams
        else:
            self.should_exit = True


def main(argv: list[str] | None = None, prog: str = "refengine-serve") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=ns.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ns.data_parallel_size != 1:
        return serve_fleet(ns, argv)
    from refengine.distributed.launch import run_torchrun_worker, torchrun_env

    env = torchrun_env()
    if env is not None and env[0] != 0:  # under torchrun, ranks other than 0 serve the driver's steps
        try:
            return run_torchrun_worker(engine_args_from(ns))
        except RefEngineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        from refengine.engine import LLMEngine
        from refengine.server.app import Server
        from refengine.server.compute_thread import ComputeThread
        from refengine.server.http_protocol import header_timeout_protocol
        from refengine.server.request_body import BodyLimits

        protocol = header_timeout_protocol(ns.timeout_request_header, http_protocol_class(ns.http))
        loop = event_loop(ns.loop)
        if ns.max_waiting_requests < 1:
            raise RefEngineError("--max-waiting-requests must be >= 1")
        if ns.max_request_body_bytes < 1:
            raise RefEngineError("--max-request-body-bytes must be >= 1")
        for flag in ("timeout_keep_alive", "timeout_request_header", "timeout_request_body"):
            if not getattr(ns, flag) > 0:
                raise RefEngineError(f"--{flag.replace('_', '-')} must be > 0 seconds")
        # Built on the thread that will step it: one OpenMP team for the engine's torch work
        # (refengine/server/compute_thread.py).
        compute = ComputeThread()
        args = engine_args_from(ns)
        engine = compute.call(lambda: LLMEngine(args))
    except RefEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # RankFailedError: a rank died while starting
        print(f"error: {exc}", file=sys.stderr)
        return 1
    name = ns.served_model_name or engine.args.model
    limits = BodyLimits(max_bytes=ns.max_request_body_bytes, timeout_s=ns.timeout_request_body)
    server = Server(
        engine,
        name,
        api_key=ns.api_key,
        max_waiting_requests=ns.max_waiting_requests,
        body_limits=limits,
        compute_thread=compute,
    )
    cfg = engine.cache_config
    pc = engine.parallel_config
    layout = f", TP {pc.tensor_parallel_size} x PP {pc.pipeline_parallel_size}" if pc.world_size > 1 else ""
    print(
        f"refengine serving '{name}' on http://{ns.host}:{ns.port} (device {engine.device}, {engine.dtype}, "
        f"max_model_len {engine.max_model_len}, {cfg.num_blocks} KV blocks of {cfg.block_size} tokens{layout}; "
        f"HTTP {implementations_in_use(ns.http, loop)})",
        flush=True,
    )
    if getattr(engine, "quant", None) is not None:  # the FP8 precision policy in force, and what it saves
        print(f"{engine.quant.policy.summary()}\nmemory: {engine.quant_memory.summary()}", flush=True)
    config = uvicorn.Config(
        server.app(),
        host=ns.host,
        port=ns.port,
        log_level=ns.log_level,
        timeout_graceful_shutdown=ns.graceful_shutdown_s,
        timeout_keep_alive=ns.timeout_keep_alive,
        http=protocol,
        loop=loop,
    )
    # This process serves this engine for its whole life: freeze what start-up built out of the
    # garbage collector's full collections, which otherwise walk it mid-serving (refengine/gc_heap.py).
    freeze_startup_heap("server")
    try:
        _GracefulServer(config).run()
    finally:
        engine.shutdown()  # stops the other ranks
    return 0


def serve_fleet(ns: argparse.Namespace, argv: list[str]) -> int:
    """--data-parallel-size N: N replica processes (the same argv each), the front on --port."""
    from refengine.server.dp_front import DataParallelFront
    from refengine.server.dp_replicas import (
        ReplicaSet,
        ReplicaStartError,
        cpu_slices,
        front_cores,
        gpu_slices,
        visible_gpus,
    )

    try:
        if ns.data_parallel_size < 1:
            raise RefEngineError(f"--data-parallel-size must be >= 1, got {ns.data_parallel_size}")
        from refengine.model.tiny import resolve_model

        front_protocol = http_protocol_class(ns.http)  # checked here once; the replicas take the same flags
        event_loop(ns.loop)
        args = engine_args_from(ns)  # a mistake in the engine flags or the model is said once here, not N times
        resolve_model(args.model)  # (and a built-in preset is generated once, before the replicas load it)
        per_replica = args.tensor_parallel_size * args.pipeline_parallel_size
        visible = visible_gpus(dict(os.environ), args.device)
        gpus = gpu_slices(ns.data_parallel_size, per_replica, visible)
        if visible and gpus[0] is None:
            print(
                f"warning: {len(visible)} GPUs for {ns.data_parallel_size} replicas of {per_replica}: the "
                "replicas share them",
                file=sys.stderr,
            )
        cpus = cpu_slices(ns.data_parallel_size, front_cores())
        fleet = ReplicaSet(ns.data_parallel_size, argv, gpus, cpus)
        fleet.start(ns.replica_startup_timeout_s)
    except ReplicaStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if exc.returncode == 2 else 1
    except RefEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    front = DataParallelFront(fleet.replicas, ns.lb_policy)
    ports = ", ".join(str(r.port) for r in fleet.replicas)
    pinned = "" if cpus[0] is None else ", cores " + " | ".join(",".join(map(str, sorted(c or ()))) for c in cpus)
    print(
        f"refengine fleet on http://{ns.host}:{ns.port}: {ns.data_parallel_size} replicas ({ns.lb_policy}) "
        f"on 127.0.0.1 ports {ports}{pinned}",
        flush=True,
    )
    config = uvicorn.Config(
        front.app(),
        host=ns.host,
        port=ns.port,
        log_level=ns.log_level,
        timeout_graceful_shutdown=ns.graceful_shutdown_s,
        timeout_keep_alive=ns.timeout_keep_alive,
        http=front_protocol,
        loop=ns.loop,
    )
    try:
        _GracefulServer(config).run()
    finally:
        fleet.stop(grace_s=ns.graceful_shutdown_s + 5.0)
    return 0
