"""CPU cost of the default probes (gpu, server, host, irq, tcp) at a 1 s interval.

Runs the probes in this process for --seconds against an idle embedded engine (tiny-test, so the
server probe scrapes a real /metrics page and the tcp probe has a target port), and reports:
  - each probe thread's CPU time (thread_time around its samples), per wall second;
  - the whole process's CPU (user + sys) over the same period, minus an equally long idle
    baseline of this process, which also counts the runner's threads and scheduling;
  - CPU of the `ss` child processes the tcp probe starts (RUSAGE_CHILDREN).
Target: all default probes together under 3% of one core.

    python bench/probe_overhead.py [--seconds 20] [--interval 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmbench.sweep.embedded import EmbeddedServer
from probes.base import ProbeContext
from probes.registry import DEFAULT_PROBES
from probes.runner import ProbeSet


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(seconds: float, interval: float, names: list[str]) -> dict:
    server = EmbeddedServer("tiny-test").start()
    try:
        # The same idle period without probes: what this process costs doing nothing.
        c0, w0 = _cpu(resource.RUSAGE_SELF), time.monotonic()
        time.sleep(seconds)
        idle = (_cpu(resource.RUSAGE_SELF) - c0) / (time.monotonic() - w0)
        with tempfile.TemporaryDirectory() as tmp:
            ctx = ProbeContext(
                out_dir=Path(tmp), target_url=server.url, server_pid=server.proc.pid, interval_s=interval
            )
            pset = ProbeSet(names, ctx, log=lambda m: print(m, file=sys.stderr))
            c0, k0, w0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
            availability = pset.start()
            time.sleep(seconds)
            stats = pset.stop()
            wall = time.monotonic() - w0
            proc = (_cpu(resource.RUSAGE_SELF) - c0) / wall
            children = (_cpu(resource.RUSAGE_CHILDREN) - k0) / wall
    finally:
        server.stop()
    per_probe = {n: round(100 * s.cpu_s / s.wall_s, 3) for n, s in stats.items() if s.wall_s}
    return {
        "seconds": seconds,
        "interval_s": interval,
        "probes": availability,
        "per_probe_thread_pct_of_core": per_probe,
        "threads_total_pct": round(sum(per_probe.values()), 3),
        "process_pct_minus_idle": round(100 * (proc - idle), 3),
        "idle_process_pct": round(100 * idle, 3),
        "ss_children_pct": round(100 * children, 3),
        "total_pct": round(100 * (proc - idle + children), 3),
        "samples": {n: s.samples for n, s in stats.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--probes", default=",".join(DEFAULT_PROBES))
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    res = measure(a.seconds, a.interval, a.probes.split(","))
    res["cpus"] = os.cpu_count()
    print(json.dumps(res, indent=2))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    print(
        f"default probes at {a.interval:g} s: {res['total_pct']:.2f}% of one core "
        f"(target < 3%): {'met' if res['total_pct'] < 3 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
