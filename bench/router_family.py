"""Does `p99.fleet.router` name a router's own time, measure it and say every request paid it, on cases
it was not tuned to? A seeded family of real runs: one refengine server (tiny-test) behind a TCP proxy
that holds each request a drawn delay (bench/delay_proxy.py), `llmbench sweep` through the proxy with
the server's own /metrics page as the replica's (`--replica-metrics`), at a drawn concurrency, prompt
and output length, on a quiet host or beside a busy loop (the host CI's router test failed on).

Per draw: whether the router is the first finding, the measured gap against the planted delay, and
the shape the check gives it ("every request" is right for a constant delay, "unresolved" says the
buckets cannot tell, "uneven" is wrong), with the replicas' pooled P50 bounded two ways side by side
on the same probe rows: the intervals' count-weighted mixture (analyzers/server_quantiles.py, what the
check uses) and the union of the intervals' buckets (what it used before, and still the fallback
without counts).

    python bench/router_family.py [--draws 16] [--seed 0] [--out bench/router_family.json]   # ~1 min a draw
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from analyzers.probe_series import read_probe
from analyzers.server_quantiles import quantile_range
from analyzers.triage.fleet.router_gap import level_gaps
from analyzers.triage.p99 import diagnose_p99
from bench.common import machine, matmul_peak, print_table, write_json
from bench.delay_proxy import delay_proxy
from bench.diagnosis_accuracy import finish, sweep
from bench.diagnosis_faults import Burners
from bench.loopback_server import launch_refengine, wait_healthy
from rundir import RunDir
from rundir.table import RequestTable

ROUTER_ID = "p99.fleet.router"


def draw(seed: int, index: int) -> dict:
    rng = random.Random(f"router-family/{seed}/{index}")
    return {
        "delay_s": round(rng.uniform(0.025, 0.150), 3),
        "concurrency": rng.choice([1, 2, 4, 8]),
        "input_len": rng.choice([32, 128, 512]),
        "output_len": rng.choice([16, 32, 64]),
        "busy": rng.random() < 0.5,  # one busy loop beside the server and the client
    }


def measure(tmp: Path, index: int, d: dict, backend: str) -> dict:
    out = tmp / f"draw-{index}"
    burners = Burners(1 if d["busy"] else 0)
    with delay_proxy(backend, d["delay_s"]) as router:
        burners.start()
        try:
            finish(sweep(out, _sweep_args(router, backend, d)))
        finally:
            burners.stop()
    run = RunDir(out)
    diag = diagnose_p99(run)
    first = diag.findings[0].check_id if diag.findings else None
    server = read_probe(run.probe_file("server"), "server")
    table = RequestTable.load(run)
    gaps, skipped = level_gaps(table, server, None) if server is not None else ([], ["no server probe"])
    if not gaps:
        return {**d, "first": first, "judged": False, "why": skipped}
    (gap,) = gaps
    union = _union(table, server)
    return {
        **d,
        "first": first,
        "judged": True,
        "requests": gap.n,
        "gap_s": round(gap.gap_s, 4),
        "shape": gap.shape,
        "shape_union": union.shape,
        "median_gap_range_s": gap.evidence().get("median_gap_range_s"),
        "median_gap_range_union_s": union.evidence().get("median_gap_range_s"),
        "p50_width_s": _width(gap.replicas_p50),
        "p50_width_union_s": _width(union.replicas_p50),
    }


def _sweep_args(router: str, backend: str, d: dict) -> list[str]:
    return [
        "--target", router, "--model", "tiny-test", "--replica-metrics", f"{backend}/metrics",
        "--concurrency", str(d["concurrency"]), "--input-len", str(d["input_len"]),
        "--output-len", str(d["output_len"]), "--warmup", "2s", "--duration", "8s", "--probes", "server",
    ]  # fmt: skip


def _union(table: RequestTable, server):
    """The same level's gap with the replicas' quantiles bounded as before: the union of the intervals'
    buckets (quantile_range without the counts), on the rows the check itself read."""
    import analyzers.triage.fleet.router_gap as router_gap

    def union(numeric: dict, name: str, rows):
        return quantile_range({k: v for k, v in numeric.items() if k != "ttft_count"}, name, rows)

    with mock.patch.object(router_gap, "quantile_range", union):
        (gap,), _ = router_gap.level_gaps(table, server, None)
    return gap


def _width(r) -> float | None:
    return None if r is None else round(r[1] - r[0], 4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draws", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    gflops = matmul_peak([(2048, 2048, 2048)])["2048x2048 @ 2048x2048"] / 1e9
    print(f"float32 matmul {gflops:.1f} GFLOP/s")
    t0 = time.monotonic()
    results = []
    proc, backend = launch_refengine(["--model", "tiny-test"])
    try:
        wait_healthy(backend, proc)
        with tempfile.TemporaryDirectory(prefix="router-family-") as tmp:
            for i in range(a.draws):
                d = draw(a.seed, i)
                results.append(measure(Path(tmp), i, d, backend))
                print(f"draw {i}: {results[-1]}")
    finally:
        proc.kill()
        proc.wait()
    judged = [r for r in results if r["judged"]]
    rows = [
        [
            i, f"{r['delay_s'] * 1e3:.0f}", r["concurrency"], r["input_len"], r["output_len"], "busy" if r["busy"] else "quiet",
            r["first"] == ROUTER_ID, f"{r['gap_s'] * 1e3:.1f}" if r["judged"] else "-", r.get("shape", "-"),
            r.get("shape_union", "-"),
        ]
        for i, r in enumerate(results)
    ]  # fmt: skip
    print_table(
        "a router's constant delay, drawn",
        ["#", "delay ms", "c", "in", "out", "host", "router first", "gap ms", "shape", "shape (union)"],
        rows,
    )
    summary = {
        "draws": len(results),
        "judged": len(judged),
        "router_first": sum(r["first"] == ROUTER_ID for r in results),
        "gap_error_median": statistics.median(abs(r["gap_s"] - r["delay_s"]) / r["delay_s"] for r in judged)
        if judged
        else None,
        "shapes": {k: dict(collections.Counter(r[k] for r in judged)) for k in ("shape", "shape_union")},
        "p50_width_median_s": {
            k: statistics.median(r[k] for r in judged if r[k] is not None) for k in ("p50_width_s", "p50_width_union_s")
        }
        if judged
        else None,
    }
    print(summary)
    write_json(
        a.out,
        {"machine": machine(), "matmul_gflops": round(gflops, 1), "args": vars(a), "wall_s": round(time.monotonic() - t0),
         "summary": summary, "draws": results},
    )  # fmt: skip


if __name__ == "__main__":
    main()
