"""The locust side of a level, run in processes of its own: importing locust monkey-patches the
process with gevent, which the caller (a Typer CLI with rich progress bars) must not suffer.

  python -m loadgen.locust_proc --local                 one process: LocalRunner
  python -m loadgen.locust_proc --master --expect-workers N [--bind-host H] [--port P]
  python -m loadgen.locust_proc --worker --master-host H [--port P] [--once]

--local and --master read the level's config as one JSON object on stdin
({"level": LevelSpec, "target": TargetSpec, "workload": WorkloadOptions}) and write the
coordinator's JSON lines (see coordinator.py) on stdout; their logs go to stderr.

Many machines: start `--worker --master-host <this machine>` on each load machine (they wait for
a master and, without --once, serve one level after another), then run each level with
run_level(..., master_bind="0.0.0.0:5557") with LevelSpec.workers = the number of workers. The
workers need nothing but the master's address: the master sends them the level's config (a
sharegpt dataset_path or tokenizer path must exist on each of them, though).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import resource
import signal
import sys
import time
import traceback

import gevent
import locust  # noqa: F401  (monkey-patches this process with gevent, first thing)
from locust import User
from locust.env import Environment

from loadgen.coordinator import Coordinator, JsonLinesOut, fd_for_output, user_count_for
from loadgen.locust_users import ClosedLoopUser, OpenLoopPacer
from loadgen.session import MSG_CONFIG, LevelSession, attach_worker_side
from loadgen.specs import LevelSpec

DEFAULT_MASTER_PORT = 5557
LEAD_LOCAL_S = 0.2  # from spawned users to the first request: time for the plan to arrive
LEAD_DISTRIBUTED_S = 0.5
USER_CLASSES: list[type[User]] = [ClosedLoopUser, OpenLoopPacer]


class LevelEnvironment(Environment):
    """locust's Environment with the level's session, which the users read (locust_users.py)."""

    llmbench_session: LevelSession


def run_local(config: dict, out: JsonLinesOut) -> str:
    level = LevelSpec(**config["level"])
    env = LevelEnvironment(user_classes=USER_CLASSES, host=config["target"]["url"])
    runner = env.create_local_runner()
    coordinator = Coordinator(runner, level, n_workers=1, out=out)
    _stop_on_sigterm(coordinator)
    env.llmbench_session = LevelSession({**config, "worker_index": 0, "n_workers": 1}, runner)
    attach_worker_side(runner, make_session=None)
    user_class = OpenLoopPacer if level.open_loop else ClosedLoopUser
    freeze_setup_heap()
    try:
        return coordinator.run(user_class, user_count_for(level, 1), LEAD_LOCAL_S)
    finally:
        runner.quit()


def run_master(
    config: dict,
    out: JsonLinesOut,
    bind_host: str = "*",
    bind_port: int = DEFAULT_MASTER_PORT,
    expect_workers: int = 1,
    connect_timeout_s: float = 60.0,
) -> str:
    level = LevelSpec(**config["level"])
    env = LevelEnvironment(user_classes=USER_CLASSES, host=config["target"]["url"])
    runner = env.create_master_runner(master_bind_host=bind_host, master_bind_port=bind_port)
    coordinator = Coordinator(runner, level, n_workers=expect_workers, out=out)
    _stop_on_sigterm(coordinator)
    try:
        deadline = time.time() + connect_timeout_s
        while runner.worker_count < expect_workers:
            if time.time() > deadline:
                raise TimeoutError(
                    f"{runner.worker_count} of {expect_workers} locust workers connected in {connect_timeout_s:g} s"
                )
            gevent.sleep(0.05)
        workers = sorted(runner.clients.keys(), key=runner.get_worker_index)[:expect_workers]
        # A worker registers its message handlers just after it connects, so a config sent in
        # that gap is dropped ("Unknown message type"): send it again until every worker is
        # ready (workers ignore a repeat of the config they already have).
        while not coordinator.all_ready.is_set():
            if time.time() > deadline + connect_timeout_s:
                raise TimeoutError(f"only {len(coordinator.ready)} of {expect_workers} workers set up the level")
            for index, client_id in enumerate(workers):
                runner.send_message(
                    MSG_CONFIG, {**config, "worker_index": index, "n_workers": expect_workers}, client_id=client_id
                )
            coordinator.all_ready.wait(timeout=1.0)
        user_class = OpenLoopPacer if level.open_loop else ClosedLoopUser
        freeze_setup_heap()
        return coordinator.run(user_class, user_count_for(level, expect_workers), LEAD_DISTRIBUTED_S)
    finally:
        runner.quit()


def run_worker(master_host: str, master_port: int = DEFAULT_MASTER_PORT, once: bool = False) -> None:
    """Serve levels for masters at master_host:master_port; with once, just the next one."""
    while True:
        env = LevelEnvironment(user_classes=USER_CLASSES)
        try:
            runner = env.create_worker_runner(master_host, master_port)
        except ConnectionError:
            if once:
                raise
            continue  # no master yet: keep waiting for the next level
        attach_worker_side(runner, make_session=lambda cfg, r=runner: LevelSession(cfg, r))
        runner.greenlet.join()  # until the master says quit
        if once:
            return


def _stop_on_sigterm(coordinator: Coordinator) -> None:
    # The parent sends SIGTERM on Ctrl-C: stop the level the orderly way, so that the requests in
    # flight are recorded as cancelled instead of lost.
    gevent.signal_handler(signal.SIGTERM, coordinator.stop, "interrupted")


def freeze_setup_heap() -> None:
    """Take what this process built before its level (locust, gevent, the session's prepared requests)
    out of the garbage collector's full collections. A full collection walks every live container, and
    in this process it stops every user's greenlet at once: the chunks that arrive meanwhile are
    stamped late, which reads as the server's latency (15-31 ms each here, bench/gc_pauses.py;
    docs/metrics.md, "The client's own pauses"). What the level allocates is collected as before."""
    gc.collect()
    gc.freeze()


def _raise_fd_limit() -> None:
    # Open loop keeps one socket per request in flight; the default soft limit (often 1024) is too low.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadgen.locust_proc", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true")
    mode.add_argument("--master", action="store_true")
    mode.add_argument("--worker", action="store_true")
    p.add_argument("--bind-host", default="*")
    p.add_argument("--master-host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_MASTER_PORT)
    p.add_argument("--expect-workers", type=int, default=1)
    p.add_argument("--once", action="store_true", help="worker: serve one level, then exit")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    _raise_fd_limit()
    if args.worker:
        freeze_setup_heap()  # once: a worker builds a session per level, and a frozen one is never freed
        run_worker(args.master_host, args.port, once=args.once)
        return 0
    out = JsonLinesOut(fd_for_output())
    try:
        config = json.loads(sys.stdin.read())
        if args.local:
            run_local(config, out)
        else:
            run_master(config, out, args.bind_host, args.port, args.expect_workers)
        return 0
    except Exception as exc:  # noqa: BLE001 - whatever failed is reported to the parent as an error line
        traceback.print_exc()
        out.write({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
