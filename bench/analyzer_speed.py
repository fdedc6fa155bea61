"""How fast the analyzers summarize a big run: N synthetic request records (default 1,000,000) in a
real run directory, loaded from requests.jsonl and summarized (every level's percentiles with
bootstrap intervals, throughput and its block bootstrap, SLO verdicts, goodput, scaling, findings).

Target: 1 million records summarized in under 10 s on this machine (the summary itself; the JSON
parse of requests.jsonl is timed and reported beside it, because it is Python's json module,
not our code, that sets that figure).

Records: 8 concurrency levels × 125,000 requests, exponential-ish TTFT and TPOT, 16 output tokens
(15 inter-token gaps each, so 15 M pooled ITL values), 1% errors, written in RequestRecord's own
JSON shape. The report step (figures and HTML for the same run) is timed too.

    python bench/analyzer_speed.py [--n 1000000] [--keep DIR] [--json PATH] [--no-report]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.summary import level_windows, summarize_table
from rundir import LevelMeta, RunDir, RunInfo
from rundir.table_cache import load_cached

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
OUT_TOKENS = 16
T0 = 1_800_000_000.0


def write_run(path: Path, n: int, seed: int = 0) -> RunDir:
    """A run directory with n records, written line by line as the sweep would (no RunDir.append
    per record: that fsyncs, which is the sweep's business, not this benchmark's)."""
    rng = np.random.default_rng(seed)
    run = RunDir(path)
    per = n // len(LEVELS)
    info = RunInfo.from_dict(
        dict(
            run_id=path.name,
            command=["bench/analyzer_speed.py"],
            target={"url": None, "model": "synthetic", "kind": "external"},
            sweep={
                "concurrency": list(LEVELS),
                "request_rate": [],
                "input_lens": [128],
                "output_lens": [OUT_TOKENS],
                "duration_s": 600.0,
            },
            slos={"ttft_p99_s": 1.5, "tpot_p95_s": 0.05},
            host={},
            tool_version="bench",
            status="complete",
            started=T0,
            finished=T0 + 600 * len(LEVELS),
        )
    )
    for i, c in enumerate(LEVELS):
        info.levels_done.append(f"c{c}-in128-out{OUT_TOKENS}")
        info.level_meta[info.levels_done[-1]] = LevelMeta(
            window_s=600.0, window_start=T0 + 600 * i, window_end=T0 + 600 * (i + 1)
        )
    run.create(info)
    with open(run.requests_jsonl, "w", encoding="utf-8") as f:
        for i, c in enumerate(LEVELS):
            level = f"c{c}-in128-out{OUT_TOKENS}"
            sent = T0 + 600 * i + np.sort(rng.uniform(0, 600, per))
            ttft = 0.05 * c**0.5 + rng.exponential(0.05 * c**0.5, per)
            gaps = 0.01 + rng.exponential(0.002 * c**0.5, (per, OUT_TOKENS - 1))
            failed = rng.random(per) < 0.01
            lines = []
            for j in range(per):
                if failed[j]:
                    rec = {
                        "level_id": level,
                        "concurrency": c,
                        "request_rate": None,
                        "target_input_len": 128,
                        "target_output_len": OUT_TOKENS,
                        "t_scheduled": sent[j],
                        "t_sent": sent[j],
                        "t_first_token": None,
                        "t_done": sent[j] + 0.01,
                        "status": "error",
                        "in_window": True,
                        "error": "HTTP 503: overloaded",
                        "error_kind": "http_status",
                        "http_status": 503,
                        "e2e_s": 0.01,
                        "itl_s": [],
                    }
                else:
                    g = gaps[j]
                    e2e = ttft[j] + g.sum()
                    rec = {
                        "level_id": level,
                        "concurrency": c,
                        "request_rate": None,
                        "target_input_len": 128,
                        "target_output_len": OUT_TOKENS,
                        "t_scheduled": sent[j],
                        "t_sent": sent[j],
                        "t_first_token": sent[j] + ttft[j],
                        "t_done": sent[j] + e2e,
                        "status": "ok",
                        "in_window": True,
                        "prompt_tokens": 128,
                        "completion_tokens": OUT_TOKENS,
                        "client_prompt_tokens": 128,
                        "client_completion_tokens": OUT_TOKENS,
                        "ttft_s": ttft[j],
                        "tpot_s": g.sum() / (OUT_TOKENS - 1),
                        "e2e_s": e2e,
                        "itl_s": g.tolist(),
                        "worker_id": "w0",
                        "send_lag_s": 0.0,
                    }
                lines.append(json.dumps(rec, separators=(",", ":")))
            f.write("\n".join(lines) + "\n")
    return run


def timed(fn, *args):
    """(result, wall seconds, CPU seconds of this process)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="request records to generate")
    ap.add_argument(
        "--keep",
        type=Path,
        help="write the run here and keep it (default: a temp dir, removed); an existing run there is reused",
    )
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument("--no-report", action="store_true", help="skip the HTML report step")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="analyzer_speed_"))
    path = base / "run" if args.keep is None else base
    try:
        t = time.perf_counter()
        if RunDir(path).exists():  # a --keep run from before: reuse it, parse it afresh
            run = RunDir(path)
            shutil.rmtree(path / ".cache", ignore_errors=True)
        else:
            run = write_run(path, args.n)
        gen_s = time.perf_counter() - t
        size_mb = run.requests_jsonl.stat().st_size / 1e6
        # Wall and CPU seconds of each step: the machine is shared, and CPU time is what our code costs.
        table, load_s, load_cpu = timed(load_cached, run)  # parses requests.jsonl, writes the cache
        cached, cached_load_s, cached_cpu = timed(load_cached, run)
        assert len(cached) == len(table) and np.array_equal(cached.itl, table.itl)
        info = run.read_info()
        summary, summarize_s, summarize_cpu = timed(summarize_table, cached, info, level_windows(run, info))
        report_s = report_cpu = html = None
        if not args.no_report:
            from analyzers.probe_series import read_probes
            from reports.html import render_report

            html, report_s, report_cpu = timed(render_report, summary, cached, read_probes(run))
        result = {
            "records": len(table),
            "itl_values": int(table.itl.size),
            "levels": len(summary.levels),
            "jsonl_mb": round(size_mb, 1),
            "generate_s": round(gen_s, 1),
            "parse_s": round(load_s, 2),
            "parse_cpu_s": round(load_cpu, 2),
            "cached_load_s": round(cached_load_s, 2),
            "cached_load_cpu_s": round(cached_cpu, 2),
            "summarize_s": round(summarize_s, 2),
            "summarize_cpu_s": round(summarize_cpu, 2),
            "report_render_s": None if report_s is None else round(report_s, 2),
            "report_render_cpu_s": None if report_cpu is None else round(report_cpu, 2),
            "report_kb": None if html is None else round(len(html) / 1e3),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3),
            "loadavg_1m": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        }
        lv = summary.levels[-1]
        result["check"] = {
            "level": lv.level_id,
            "n_ok": lv.n_ok,
            "ttft_p99_s": round(lv.ttft.p["p99"], 4),
            "ttft_p99_ci": [round(x, 4) for x in lv.ttft.ci["p99"]],
            "itl_n": lv.itl.n,
        }
        print(json.dumps(result, indent=2))
        print(
            f"\n{len(table):,} records: parse {load_s:.1f} s, cached load {cached_load_s:.2f} s, "
            f"summarize {summarize_s:.2f} s (CPU {summarize_cpu:.2f} s) "
            f"(target < 10 s: {'met' if summarize_s < 10 else 'MISSED'})"
        )
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
