"""What the garbage collector's full collections cost a served level, with the start-up heap frozen or not.

refengine's server and each locust process freeze what they built before serving
(refengine/gc_heap.py, loadgen/locust_proc.py `freeze_setup_heap`). This bench runs the same embedded
sweep with this checkout's code ("frozen") and with the code of `--before` ("thawed", by default the
commit before the freeze, checked out into a temporary git worktree), the arms alternating
(A B B A ...), and reports per arm and level the collector's pauses inside the level (every process
of the run times each collection through `gc.callbacks`; pauses of 2 ms or more are kept, by
process: server, client) beside the level's own TTFT, ITL and TPOT percentiles and output tokens/s
from the run's summary.json, and every full collection over each run's whole served stretch.

First, the price of one full collection where it is paid: a process that builds the engine as the
server does, timed `gc.collect()` before and after `freeze_startup_heap` (`--heap-models`). Both arms
of the sweeps run the same hook, installed as a sitecustomize on PYTHONPATH that this script writes into
a temporary folder. Run it alone on the machine.

    python bench/gc_pauses.py [--model tiny-test] [--concurrency 4,8,16] [--duration 30] [--reps 2]
                              [--before REV] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, matmul_peak, print_table, write_json  # noqa: E402
from rundir import RunDir  # noqa: E402
from rundir.table import RequestTable  # noqa: E402

MIN_PAUSE_MS = 2.0  # below this a collection is the collector's normal young-generation work

HOOK = """
import gc, json, os, sys, time
_dir = os.environ["GC_BENCH_DIR"]
_out, _t0 = [None], [0.0]
def _timed(phase, info):
    if phase == "start":
        _t0[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _t0[0]) * 1e3
    if ms < %(min_ms)r:
        return
    if _out[0] is None:
        _out[0] = open(os.path.join(_dir, "gc-%%d.jsonl" %% os.getpid()), "a")
        _out[0].write(json.dumps({"argv": " ".join(sys.argv)}) + "\\n")
    _out[0].write(json.dumps({"t": time.time(), "gen": info["generation"], "ms": ms}) + "\\n")
    _out[0].flush()
gc.callbacks.append(_timed)
""" % {"min_ms": MIN_PAUSE_MS}


def _role(argv: str) -> str:
    if "refengine/server" in argv:
        return "server"
    if "locust_proc" in argv or argv.strip().startswith("-m --"):  # the level's locust process
        return "client"
    return "sweep"


def read_pauses(gc_dir: Path) -> list[dict]:
    out = []
    for f in gc_dir.glob("gc-*.jsonl"):
        lines = f.read_text().splitlines()
        role = _role(json.loads(lines[0])["argv"])
        out += [{**json.loads(line), "role": role} for line in lines[1:]]
    return out


def spans(run: RunDir) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Each level's measured stretch (the first send to the last finish of its window's requests), and
    the run's whole served stretch (its first send to its last finish, every request counted)."""
    df = RequestTable.load(run).df
    window = df[df["in_window"] & df["t_done"].notna()]
    levels = {str(k): (float(g["t_sent"].min()), float(g["t_done"].max())) for k, g in window.groupby("level_id")}
    return levels, (float(df["t_sent"].min()), float(df["t_done"].fillna(df["t_sent"]).max()))


def one_run(arm: str, code: Path, args, work: Path, rep: int, runs: list[dict]) -> list[dict]:
    """One sweep of `code` (a checkout of the project), every process of it timing its collections."""
    gc_dir = work / f"gc-{arm}-{rep}"
    gc_dir.mkdir()
    run = RunDir(work / f"run-{arm}-{rep}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(work / "hook"), str(code), os.environ.get("PYTHONPATH", "")]),
        "GC_BENCH_DIR": str(gc_dir),
    }
    cmd = [sys.executable, str(code / "llmbench" / "cli.py"), "sweep", "--model", args.model]
    cmd += ["--concurrency", args.concurrency, "--input-len", str(args.input_len), "--output-len", "64"]
    cmd += ["--duration", str(args.duration), "--slo-ttft", "60", "--out", str(run.path)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pauses = read_pauses(gc_dir)
    summary = {lv["level_id"]: lv for lv in (run.read_summary() or {"levels": []})["levels"]}
    # The whole served stretch too (warm-ups and drains included): a full collection is rare enough
    # that a level's window may or may not catch one, and where one falls it stalls every stream.
    level_spans, served = spans(run)
    whole = {"arm": arm, "rep": rep, "served_s": served[1] - served[0]}
    for role in ("server", "client"):
        full = [p["ms"] for p in pauses if p["role"] == role and p["gen"] == 2 and served[0] <= p["t"] <= served[1]]
        whole[f"{role}_full_collections_ms"] = sorted(full)
    runs.append(whole)
    rows = []
    for level_id, (lo, hi) in level_spans.items():
        inside = [p for p in pauses if lo <= p["t"] <= hi]
        lv = summary[level_id]
        row = {"arm": arm, "rep": rep, "level_id": level_id, "span_s": hi - lo}
        for role in ("server", "client"):
            ms = [p["ms"] for p in inside if p["role"] == role]
            row[f"{role}_pauses"] = len(ms)
            row[f"{role}_pause_max_ms"] = max(ms, default=0.0)
            row[f"{role}_pause_sum_ms"] = sum(ms)
            row[f"{role}_full_pauses"] = sum(1 for p in inside if p["role"] == role and p["gen"] == 2)
        for metric, q in (("ttft", "p50"), ("ttft", "p99"), ("itl", "p99"), ("itl", "p99.9"), ("tpot", "p95")):
            row[f"{metric}_{q}_ms"] = lv[metric]["p"][q] * 1e3
        row["output_tok_s"] = lv["output_tok_s"]
        rows.append(row)
    return rows


HEAP_PROBE = """
import gc, json, statistics, sys, time
from refengine.engine import LLMEngine
from refengine.server.cli import build_parser, engine_args_from
import refengine.server.app, uvicorn  # noqa: F401  (what a served process also holds)
engine = LLMEngine(engine_args_from(build_parser().parse_args(["--model", sys.argv[1]])))
def full_collection_ms():
    times = []
    for _ in range(5):
        t = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)
tracked = len(gc.get_objects())
thawed = full_collection_ms()
from refengine.gc_heap import freeze_startup_heap
frozen_objects = freeze_startup_heap("bench")
print(json.dumps({"tracked": tracked, "kv_blocks": engine.cache_config.num_blocks, "thawed_ms": thawed,
                  "frozen_objects": frozen_objects, "frozen_ms": full_collection_ms()}))
"""


def heap_cost(model: str) -> dict:
    """What one full collection costs a process that holds a served engine's start-up heap, before and
    after this checkout's freeze: the pause every stream waits through when the collector decides to."""
    out = subprocess.run([sys.executable, "-c", HEAP_PROBE, model], capture_output=True, text=True, check=True)
    return {"model": model, **json.loads(out.stdout.strip().splitlines()[-1])}


def _run_arms(args, work: Path, before: Path, rows: list[dict], runs: list[dict]) -> None:
    for rep in range(args.reps):
        order = ("thawed", "frozen") if rep % 2 == 0 else ("frozen", "thawed")
        for arm in order:
            print(f"rep {rep + 1}/{args.reps}: {arm}", flush=True)
            rows += one_run(arm, ROOT if arm == "frozen" else before, args, work, rep, runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-test")
    p.add_argument("--concurrency", default="4,8,16")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--reps", type=int, default=2, help="runs per arm, alternating A B B A ...")
    p.add_argument("--heap-models", default="tiny-test,tiny", help="models whose start-up heap is collected")
    p.add_argument("--before", default="dc00e11", help="the thawed arm's code: a git revision before the freeze")
    p.add_argument("--out")
    args = p.parse_args()
    host = {**machine(), "matmul": matmul_peak([(512, 1024, 1024)])}
    heaps = [heap_cost(m) for m in args.heap_models.split(",")]
    print_table(
        "one full collection (gc.collect, median of 5) in a process holding a served engine's start-up heap",
        ["model", "KV blocks", "objects tracked", "thawed ms", "objects frozen", "frozen ms"],
        [
            [
                h["model"],
                h["kv_blocks"],
                h["tracked"],
                f"{h['thawed_ms']:.1f}",
                h["frozen_objects"],
                f"{h['frozen_ms']:.2f}",
            ]
            for h in heaps
        ],
    )
    rows: list[dict] = []
    runs: list[dict] = []  # one per sweep: the full collections over its whole served stretch
    with tempfile.TemporaryDirectory(prefix="gc-pauses-") as tmp:
        work = Path(tmp)
        (work / "hook").mkdir()
        (work / "hook" / "sitecustomize.py").write_text(HOOK)
        before = work / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before], check=True)
        sha = subprocess.run(["git", "-C", str(before), "rev-parse", "HEAD"], capture_output=True, text=True)
        print(f"thawed arm: {args.before} = {sha.stdout.strip()}", flush=True)
        try:
            _run_arms(args, work, before, rows, runs)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    table = []
    for r in sorted(rows, key=lambda r: (r["level_id"], r["arm"], r["rep"])):
        table.append(
            [r["level_id"], r["arm"], r["rep"], f"{r['server_pauses']} ({r['server_full_pauses']})"]
            + [f"{r['server_pause_max_ms']:.0f}", f"{r['client_pauses']} ({r['client_full_pauses']})"]
            + [f"{r['client_pause_max_ms']:.0f}"]
            + [f"{r[k]:.1f}" for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "itl_p99.9_ms", "tpot_p95_ms")]
            + [f"{r['output_tok_s']:.0f}"]
        )
    header = ["level", "arm", "rep", "server pauses (full)", "max ms", "client pauses (full)", "max ms"]
    header += ["TTFT P50", "TTFT P99", "ITL P99", "ITL P99.9", "TPOT P95", "tok/s"]
    print_table(
        f"garbage-collector pauses >= {MIN_PAUSE_MS:g} ms inside each level, and the level's figures (ms)",
        header,
        table,
    )
    print_table(
        "full (generation 2) collections over each run's served stretch, warm-ups and drains included (ms each)",
        ["arm", "rep", "served s", "server", "client"],
        [
            [w["arm"], w["rep"], f"{w['served_s']:.0f}"]
            + [
                " ".join(f"{ms:.0f}" for ms in w[f"{role}_full_collections_ms"]) or "none"
                for role in ("server", "client")
            ]
            for w in runs
        ],
    )
    for arm in ("thawed", "frozen"):
        mine = [r for r in rows if r["arm"] == arm]
        print(
            f"{arm}: server pauses max {max(r['server_pause_max_ms'] for r in mine):.0f} ms, "
            f"client max {max(r['client_pause_max_ms'] for r in mine):.0f} ms; median TTFT P99 "
            f"{statistics.median(r['ttft_p99_ms'] for r in mine):.1f} ms, ITL P99.9 "
            f"{statistics.median(r['itl_p99.9_ms'] for r in mine):.1f} ms"
        )
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {
        "bench": "gc_pauses",
        "args": vars(args),
        "frozen_sha": head,
        "machine": host,
        "heaps": heaps,
        "rows": rows,
        "runs": runs,
    }
    write_json(args.out, out)


if __name__ == "__main__":
    main()
