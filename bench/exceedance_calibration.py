"""Is the capacity verdict's exceedance test calibrated? (issue 23 item 1)

A load's verdict on "TTFT P99 <= bound" is an exact binomial test on the count of requests over the
bound (analyzers/stats/exceedance.py). Against a server whose true exceedance is known, how often
is a level called in, out, unclear? The server is the known-delay one (tests/loadgen/delay_server.py)
with `--slow-fraction P --slow-kind K`: every request gets its first token 40 ms after it arrived,
except a share P that get it no sooner than --slow-ms (above the bound), for one of two causes:

- independent: each request is slow by its own coin (what the binomial assumes);
- stall: the server stalls, and every request waiting for its first token is slow together (what
  closed loop does: one event, C requests over the bound).

For each (kind, P) one `llmbench sweep` runs one closed-loop level of --duration against it; its
requests in the window, in send order, are cut into consecutive levels of --level-requests each,
and each is judged by analyzers' own code (SloSample, check_bound) twice: as independent draws
(the test before this issue) and widened by the design effect the level's own clustering shows
(the test after: batch means, analyzers/stats/exceedance.py). A calibrated 95% test calls a load with P > 1% `in`, or one with P < 1%
`out`, in at most 5% of levels. The `if independent` column is what the binomial itself predicts for
independent requests at the realized share (exact, no simulation).

    python bench/exceedance_calibration.py [--duration 80s] [--concurrency 8] [--level-requests 400]
        [--fractions 0.005,0.01,0.015,0.03] [--kinds independent,stall] [--out F]
    python bench/exceedance_calibration.py --table bench/exceedance_calibration.json   (print it again)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cores import host_info  # noqa: E402

from analyzers.stats.exceedance import check_bound, pooled_design_effect  # noqa: E402
from analyzers.stats.slo import SloSample  # noqa: E402
from bench.loopback_server import start_script_server  # noqa: E402
from rundir.run_dir import RunDir  # noqa: E402
from rundir.table import RequestTable  # noqa: E402

TTFT_MS, ITL_MS, OUT_TOKENS, SLOW_MS = 40, 5, 2, 800
BOUND_S, QUANTILE = 0.4, 0.99  # TTFT P99 <= 400 ms: at most 1% of requests over it
VERDICTS = ("in", "out", "unclear")


def _start_server(fraction: float, kind: str, seed: int) -> tuple[subprocess.Popen, str]:
    return start_script_server(
        ROOT / "tests/loadgen/delay_server.py",
        "--ttft-ms",
        str(TTFT_MS),
        "--itl-ms",
        str(ITL_MS),
        "--slow-ms",
        str(SLOW_MS),
        "--slow-fraction",
        str(fraction),
        "--slow-kind",
        kind,
        "--seed",
        str(seed),
        name="the delay server",
    )


def _sweep(url: str, out: Path, concurrency: int, duration: str) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "llmbench.cli",
        "sweep",
        "--target",
        url,
        "--model",
        "delay",
        "--concurrency",
        str(concurrency),
        "--input-len",
        "16",
        "--output-len",
        str(OUT_TOKENS),
        "--warmup",
        "2s",
        "--duration",
        duration,
        "--probes",
        "none",
        "--slo-ttft",
        str(BOUND_S),
        "--slo-tpot",
        "1",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sweep exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return cmd


def _levels(run: Path, size: int) -> tuple[list[SloSample], int]:
    """The window's requests in send order, cut into consecutive levels of `size` (the rest dropped)."""
    df = RequestTable.load(RunDir(run)).df
    df = df[df["in_window"]].sort_values("t_sent")
    cols = [df[c].to_numpy() for c in ("status", "ttft_s", "tpot_s", "e2e_s", "target_output_len", "t_sent")]
    whole = SloSample.of(*cols)
    levels = [SloSample.of(*(c[i : i + size] for c in cols)) for i in range(0, whole.n - size + 1, size)]
    return levels, whole.n


def _judge(sample: SloSample, widened: bool, floor: float = 1.0) -> tuple[str, int, float]:
    c = check_bound("TTFT P99", sample.ttft, QUANTILE, BOUND_S, sample.sent_at if widened else None, floor)
    return c.verdict, c.over, round(c.design_effect, 2)


def _flags(sample: SloSample) -> np.ndarray:
    return (sample.ttft > BOUND_S)[np.argsort(sample.sent_at, kind="stable")]


def _judge_in_searches(levels: list[SloSample], per_search: int) -> list[tuple[str, int, float]]:
    """Each level judged as one load of a search of `per_search` consecutive levels: widened by its
    own design effect and at least the search's pooled one (analyzers.capacity.answer's rule)."""
    out = []
    for i in range(0, len(levels), per_search):
        search = levels[i : i + per_search]
        floor = pooled_design_effect([_flags(s) for s in search])
        out += [_judge(s, True, floor) for s in search]
    return out


def _binomial_rates(n: int, p: float) -> dict[str, float]:
    """P[verdict] for n independent requests each over the bound with probability p, exactly."""
    rates = dict.fromkeys(VERDICTS, 0.0)
    for k in range(n + 1):
        pmf = math.exp(
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + (k * math.log(p) if k else 0.0)
            + (n - k) * math.log1p(-p)
        )
        if pmf < 1e-12 and k > n * p:
            break
        values = np.r_[np.zeros(n - k), np.full(k, 2 * BOUND_S)]
        rates[check_bound("x", values, QUANTILE, BOUND_S).verdict] += pmf
    return rates


def _wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    mid, half = (
        (p + z * z / (2 * n)) / (1 + z * z / n),
        z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n),
    )
    return [round(max(0.0, mid - half), 3), round(min(1.0, mid + half), 3)]


def run_cell(kind: str, fraction: float, args: argparse.Namespace, tmp: Path, seed: int) -> dict:
    import httpx

    server, url = _start_server(fraction, kind, seed)
    try:
        cmd = _sweep(url, tmp / f"{kind}-{fraction}", args.concurrency, args.duration)
        health = httpx.get(url + "/health", timeout=5.0).json()
    finally:
        server.kill()
    levels, n_window = _levels(tmp / f"{kind}-{fraction}", args.level_requests)
    over_window = sum(int((s.ttft > BOUND_S).sum()) for s in levels)
    counted = len(levels) * args.level_requests
    share = over_window / counted if counted else float("nan")
    cell: dict = {
        "kind": kind,
        "fraction": fraction,
        "seed": seed,
        "sweep": " ".join(cmd[1:]),
        "server_slow": health["slow"],
        "server_requests": health["received"],
        "stalls": health["stalls"],
        "window_requests": n_window,
        "levels": len(levels),
        "level_requests": args.level_requests,
        "realized_share": round(share, 5),
    }
    for name, judged in (
        ("independent_test", [_judge(s, False) for s in levels]),
        ("widened_test", [_judge(s, True) for s in levels]),
        ("search_test", _judge_in_searches(levels, args.search_levels)),
    ):
        counts = {v: sum(j[0] == v for j in judged) for v in VERDICTS}
        cell[name] = {
            "counts": counts,
            "rates": {v: round(counts[v] / max(1, len(levels)), 3) for v in VERDICTS},
            "rate_ci95": {v: _wilson(counts[v], len(levels)) for v in VERDICTS},
            "per_level": [{"verdict": v, "over": o, "design_effect": d} for v, o, d in judged],
        }
    cell["if_independent"] = (
        {v: round(r, 3) for v, r in _binomial_rates(args.level_requests, share).items()} if 0 < share < 1 else None
    )
    return cell


def _wrong(cell: dict, test: str) -> str:
    """The rate of the wrong call: `in` when the share is over 1%, `out` when under (both at 1%)."""
    r = cell[test]["rates"]
    p, allowed = round(cell["fraction"], 9), round(1 - QUANTILE, 9)  # 1 - 0.99 is 0.010000000000000009
    parts = ([f"in {r['in']:.0%}"] if p >= allowed else []) + ([f"out {r['out']:.0%}"] if p <= allowed else [])
    return ", ".join(parts)


def print_table(out: dict) -> None:
    h = out["host"]
    print(
        f"Host: {h['cpu_model']}, {h['cores']} cores, float32 matmul {h['matmul_f32_gflops']} GFLOP/s "
        f"({h['matmul_shape']}); load average {'/'.join(map(str, h['loadavg_start']))} at start, "
        f"{'/'.join(map(str, h['loadavg_end']))} at end.\n"
    )
    tests = [t for t in ("independent_test", "widened_test", "search_test") if t in out["cells"][0]]
    names = {
        "independent_test": "independent test",
        "widened_test": "widened (own D)",
        "search_test": f"search of {out.get('search_levels', '?')} (pooled D)",
    }
    print(
        "| cause | P (nominal) | realized share | levels | "
        + " | ".join(f"{names[t]} in / out / unclear | wrong" for t in tests)
        + " | if independent in / out / unclear |"
    )
    print("| --- " * (5 + 2 * len(tests)) + "|")
    for c in out["cells"]:
        exp = c["if_independent"]
        row = [c["kind"], f"{c['fraction']:.1%}", f"{c['realized_share']:.2%}", str(c["levels"])]
        for t in tests:
            row += [" / ".join(f"{c[t]['rates'][v]:.0%}" for v in VERDICTS), _wrong(c, t)]
        row.append(" / ".join(f"{exp[v]:.0%}" for v in VERDICTS) if exp else "—")
        print("| " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", default="80s", help="Measured window of each (kind, fraction)'s one level.")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--level-requests", type=int, default=400, help="Requests per judged level.")
    ap.add_argument(
        "--search-levels",
        type=int,
        default=6,
        help="Levels per simulated capacity search, for the pooled design effect.",
    )
    ap.add_argument("--fractions", default="0.005,0.01,0.015,0.03")
    ap.add_argument("--kinds", default="independent,stall")
    ap.add_argument("--out", default=str(ROOT / "bench/exceedance_calibration.json"))
    ap.add_argument("--table", metavar="JSON", help="Print the table of a JSON this script wrote, and run nothing.")
    args = ap.parse_args()
    if args.table:
        print_table(json.loads(Path(args.table).read_text()))
        return
    host = host_info([], [])
    cells = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, kind in enumerate(args.kinds.split(",")):
            for j, fraction in enumerate(float(x) for x in args.fractions.split(",")):
                cell = run_cell(kind, fraction, args, Path(tmp), seed=100 * i + j)
                cells.append(cell)
                print(
                    f"{kind} {fraction:.1%}: realized {cell['realized_share']:.2%} over {cell['levels']} levels; "
                    f"independent test {cell['independent_test']['counts']}, widened {cell['widened_test']['counts']}, "
                    f"search {cell['search_test']['counts']}",
                    flush=True,
                )
    host["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    out = {
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "host": host,
        "bound_s": BOUND_S,
        "quantile": QUANTILE,
        "server": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "slow_ms": SLOW_MS, "output_tokens": OUT_TOKENS},
        "concurrency": args.concurrency,
        "duration": args.duration,
        "search_levels": args.search_levels,
        "wall_s": round(time.monotonic() - t0, 1),
        "cells": cells,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print_table(out)
    print(f"\nwrote {args.out} ({out['wall_s']} s)")


if __name__ == "__main__":
    main()
