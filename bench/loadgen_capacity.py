"""How much streaming load one locust worker process (and two) can offer while still timing
first tokens to within 2 ms at P99.

Target: the known-delay server (bench/loadgen_common.py wraps tests/loadgen/delay_server.py): the
first token 50 ms after a request arrives, then one every 10 ms, 16 tokens, on a free 127.0.0.1
port, killed at the end. Load: open-loop levels through loadgen.run_level (Poisson
arrivals), windows 1 s warm-up + 5 s measured, the rate doubled from 50 req/s until a level fails
(halved when the first one fails), then bisected 3 times (geometric midpoint) between the last good
and the first bad rate. The 2-worker search starts at half the 1-worker result. --quick: 0.5 + 2 s
windows, x4 steps, 2 levels per worker count (~20 s); it checks the script, not the machine.

TTFT error, the definition used: measured TTFT (client) minus the server's ACTUAL first-token
delay for that same request (first chunk ready to send - request arrived in the handler, server
clock), so that the server's own timer lateness is not blamed on the client. What is left
is the inbound path (client send, loopback, server accept/parse) plus the outbound one (loopback,
client read). The error against the injected delay (measured - 50 ms) is reported next to it.

A level is sustained when: no errors, nothing missing, end_reason complete; the client did not
fall behind (LevelResult.fell_behind: send lag P99 <= 50 ms and no locust process > 90% CPU) and
send lag P99 <= 5 ms; TTFT error P99 <= 2 ms over >= 95% of in-window requests matched to the
server's timings. The server is one Python event loop on the same 2 cores: its CPU is measured,
and a failing level is blamed on it when it was near a full core (a limit of this machine, not
of the client). --server-procs N runs N server processes on one port (SO_REUSEPORT).

    python bench/loadgen_capacity.py [--quick] [--json PATH] [--workers 1,2] [--server-procs 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from loadgen_common import CpuSampler, DelayServers, http_impl, match_server_timings

from loadgen import LevelSpec, TargetSpec, level_workload_factory, run_level

ERR_P99_LIMIT_MS = 2.0
LAG_P99_LIMIT_MS = 5.0  # TTFT starts at t_sent, so lag does not bias it; but then the rate was not offered
MIN_MATCHED = 0.95
FULL = dict(
    warmup_s=1.0,
    duration_s=5.0,
    start_rate=50.0,
    factor=2.0,
    max_rate=8000.0,
    bisect=3,
    max_levels=12,
    max_minutes=15.0,
)
QUICK = dict(
    warmup_s=0.5, duration_s=2.0, start_rate=100.0, factor=4.0, max_rate=1600.0, bisect=0, max_levels=2, max_minutes=1.0
)


def pct_ms(xs, q):
    return round(1000 * float(np.percentile(xs, q)), 3) if len(xs) else None


def measure_level(cfg, servers: DelayServers, sampler: CpuSampler, workers: int, rate: float, seed: int) -> dict:
    spec = LevelSpec(
        f"w{workers}-r{rate:g}",
        request_rate=rate,
        input_len=cfg.input_len,
        output_len=cfg.tokens,
        warmup_s=cfg.warmup_s,
        duration_s=cfg.duration_s,
        request_timeout_s=10.0,
        workers=workers,
        seed=seed,
    )
    # A wide prompt-length spread: length is the only key that ties a client record to the server's entry.
    factory = level_workload_factory(input_len_spread=0.9)
    records = []
    servers.take_timings()  # drop whatever the previous level left
    res = run_level(spec, TargetSpec(servers.url, "delay-model"), factory, records.extend)
    timings = servers.take_timings()
    t0, t1 = res.window_start, res.window_end
    dur = (t1 - t0) if t0 and t1 else cfg.duration_s
    inw = [r for r in records if r.in_window]
    ok = [r for r in inw if r.status == "ok" and r.ttft_s is not None]
    matched = match_server_timings(ok, timings)
    injected = cfg.ttft_ms / 1000
    err = [r.ttft_s - (first - arr) for r, arr, first, _ in matched]
    err_inj = [r.ttft_s - injected for r in ok]
    overshoot = [(first - arr) - injected for _, arr, first, _ in matched]
    inbound = [arr - r.t_sent for r, arr, _, _ in matched]
    outbound = [r.t_first_token - first for r, _, first, _ in matched]
    write = [w - first for _, _, first, w in matched]  # the server's send() of the first chunk
    # Streams in flight: time-average over the window of open requests (every record, any window flag).
    busy = sum(max(0.0, min(r.t_done or t1, t1) - max(r.t_sent, t0)) for r in records) if t0 else 0.0
    tokens = sum((r.completion_tokens or r.client_completion_tokens or 0) for r in ok)
    m = dict(
        level_id=spec.level_id,
        workers=workers,
        rate=rate,
        in_window=res.in_window,
        ok=len(ok),
        matched=len(matched),
        achieved_rps=round(len(inw) / dur, 1),
        out_tok_s=round(tokens / dur, 1),
        streams_in_flight=round(busy / dur, 1),
        ttft_err_p50_ms=pct_ms(err, 50),
        ttft_err_p99_ms=pct_ms(err, 99),
        ttft_err_vs_injected_p50_ms=pct_ms(err_inj, 50),
        ttft_err_vs_injected_p99_ms=pct_ms(err_inj, 99),
        server_overshoot_p50_ms=pct_ms(overshoot, 50),
        server_overshoot_p99_ms=pct_ms(overshoot, 99),
        inbound_p50_ms=pct_ms(inbound, 50),
        inbound_p99_ms=pct_ms(inbound, 99),
        outbound_p50_ms=pct_ms(outbound, 50),
        outbound_p99_ms=pct_ms(outbound, 99),
        server_write_p50_ms=pct_ms(write, 50),
        server_write_p99_ms=pct_ms(write, 99),
        negative_errors=sum(e < 0 for e in err),  # > 0: mismatched pairs (or clock resolution)
        send_lag_p99_ms=None if res.send_lag_p99_s is None else round(1000 * res.send_lag_p99_s, 3),
        client_cpu_pct=res.client_cpu_percent,
        client_cpu_by_worker=res.client_cpu_by_worker,
        errors=res.errors,
        errors_by_kind=res.errors_by_kind,
        records_missing=res.records_missing,
        cancelled_in_window=sum(r.status == "cancelled" for r in inw),
        end_reason=res.end_reason,
        fell_behind=res.fell_behind,
        fell_behind_reasons=res.fell_behind_reasons,
        wall_s=round(res.wall_s, 2),
        **({k: round(v, 2) for k, v in sampler.cpu(t0, t1).items()} if t0 else {}),
    )
    m["server_procs"] = cfg.server_procs
    m["failures"] = failures(m)
    m["sustained"] = not m["failures"]
    m["limit"] = limiting_factor(m) if m["failures"] else ""
    return m


def failures(m: dict) -> list[str]:
    f = []
    if (
        m["errors"]
        or m["records_missing"]
        or m["cancelled_in_window"]
        or m["end_reason"] != "complete"
        or m["ok"] < m["in_window"]
    ):
        f.append(f"errors {m['errors_by_kind']} missing {m['records_missing']} end {m['end_reason']}")
    f += m["fell_behind_reasons"]
    if m["send_lag_p99_ms"] is not None and m["send_lag_p99_ms"] > LAG_P99_LIMIT_MS:
        f.append(f"send lag P99 {m['send_lag_p99_ms']:.1f} ms > {LAG_P99_LIMIT_MS:g} ms")
    if m["in_window"] == 0 or m["matched"] < MIN_MATCHED * max(1, m["ok"]):
        f.append(f"only {m['matched']}/{m['ok']} requests matched to server timings")
    elif m["ttft_err_p99_ms"] > ERR_P99_LIMIT_MS:
        f.append(f"TTFT error P99 {m['ttft_err_p99_ms']:.2f} ms > {ERR_P99_LIMIT_MS:g} ms")
    return f


def limiting_factor(m: dict) -> str:
    """A best guess at what gave out first, from the CPU figures of the failing level."""
    if m["failures"][0].startswith("errors"):
        why = "errors"
    elif m.get("server_cpu_pct", 0) >= 85 * m.get("server_procs", 1):
        why = "server CPU (event loop ~full core)"
    elif (m["client_cpu_pct"] or 0) >= 85 or m["fell_behind"]:
        why = "client CPU / fell behind"
    elif m.get("machine_cpus", 0) >= 1.85:
        why = "machine CPU (2 cores full)"
    elif (m["server_overshoot_p99_ms"] or 0) > ERR_P99_LIMIT_MS:
        # Its timers fire late, so it also reads requests late (inbound): the server's loop lags.
        why = f"server event loop lagging (its timers late P99 {m['server_overshoot_p99_ms']:.1f} ms)"
    else:
        why = f"latency, no CPU saturated (in/out P99 {m['inbound_p99_ms']}/{m['outbound_p99_ms']} ms)"
    if m.get("other_cpus", 0) > 0.3:
        why += f"; other work used {m['other_cpus']:.1f} cores"
    return why


def search(cfg, servers, sampler, workers: int, start: float, deadline: float, log) -> dict:
    """Ramp by `factor` (down when the first level fails), then bisect between good and bad."""
    levels = []

    def probe(rate: float) -> bool:
        m = measure_level(cfg, servers, sampler, workers, rate, seed=len(levels))
        levels.append(m)
        log(m)
        return m["sustained"]

    def time_left() -> bool:
        return time.time() < deadline and len(levels) < cfg.max_levels + cfg.bisect

    good = bad = None
    rate = start
    while time_left() and len(levels) < cfg.max_levels:
        if probe(rate):
            good = rate
            if bad or rate * cfg.factor > cfg.max_rate:
                break
            rate = rate * cfg.factor
        else:
            bad = rate
            if good or rate / cfg.factor < cfg.start_rate / 16:  # a few requests per window: stop
                break
            rate = rate / cfg.factor
    for _ in range(cfg.bisect):
        if good is None or bad is None or bad / good < 1.08 or not time_left():
            break
        mid = float(round(math.sqrt(good * bad)))
        if probe(mid):
            good = mid
        else:
            bad = mid
    best = max((m for m in levels if m["sustained"]), key=lambda m: m["rate"], default=None)
    first_bad = min(
        (m for m in levels if not m["sustained"] and (best is None or m["rate"] > best["rate"])),
        key=lambda m: m["rate"],
        default=None,
    )
    limit = first_bad["limit"] if first_bad else ("not reached: max rate" if levels else "out of time")
    return dict(workers=workers, best=best, first_bad=first_bad, limit=limit, levels=levels)


def log_level(m: dict) -> None:
    cpu = (
        f"client {m['client_cpu_pct'] or 0:.0f}% server {m.get('server_cpu_pct', 0):.0f}% "
        f"machine {m.get('machine_cpus', 0):.2f} (other {m.get('other_cpus', 0):.2f})"
    )
    few = " (n<100: P99 ~ max)" if m["matched"] < 100 else ""
    print(
        f"  {m['level_id']:>12}: {m['achieved_rps']:7.1f} req/s {m['streams_in_flight']:6.1f} in flight | "
        f"TTFT err P50/P99 {m['ttft_err_p50_ms']}/{m['ttft_err_p99_ms']} ms (vs injected P99 "
        f"{m['ttft_err_vs_injected_p99_ms']}){few} lag P99 {m['send_lag_p99_ms']} ms | {cpu} | "
        f"{'ok' if m['sustained'] else 'FAIL: ' + '; '.join(m['failures'])}",
        flush=True,
    )


def print_table(results: list[dict]) -> None:
    header = [
        "workers",
        "max sustained req/s",
        "streams in flight",
        "output tok/s",
        "TTFT err P50/P99 ms",
        "client CPU %",
        "server CPU %",
        "limiting factor (first failing rate)",
    ]
    rows = []
    for r in results:
        b = r["best"]
        if b is None:
            rows.append([r["workers"], "none", "-", "-", "-", "-", "-", r["limit"]])
            continue
        clients = "/".join(f"{v:.0f}" for v in b["client_cpu_by_worker"].values()) or "-"
        bad = f" @ {r['first_bad']['rate']:g}/s" if r["first_bad"] else ""
        rows.append(
            [
                r["workers"],
                f"{b['achieved_rps']:.0f} (offered {b['rate']:g})",
                b["streams_in_flight"],
                f"{b['out_tok_s']:.0f}",
                f"{b['ttft_err_p50_ms']:.2f}/{b['ttft_err_p99_ms']:.2f}",
                clients,
                f"{b.get('server_cpu_pct', 0):.0f}",
                r["limit"] + bad,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths]] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke mode: short windows, few levels (< ~1 min)")
    p.add_argument("--json", metavar="PATH", help="write every level's raw figures here")
    p.add_argument("--workers", default="1,2", help="locust worker counts to search (comma-separated)")
    p.add_argument("--server-procs", type=int, default=1, help="delay server processes sharing the port (1-4)")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    p.add_argument("--input-len", type=int, default=256, help="mean prompt length (spread +-90%%)")
    a = p.parse_args()
    if not 1 <= a.server_procs <= 4:
        p.error("--server-procs must be 1..4")
    cfg = argparse.Namespace(**vars(a), **(QUICK if a.quick else FULL))
    workers = [int(w) for w in a.workers.split(",")]
    deadline = time.time() + 60 * cfg.max_minutes
    loadavg_start = os.getloadavg()
    print(
        f"delay server: first token {a.ttft_ms:g} ms, then every {a.itl_ms:g} ms, {a.tokens} tokens; "
        f"{a.server_procs} process(es), {http_impl()}; windows {cfg.warmup_s:g}+{cfg.duration_s:g} s; "
        f"TTFT error = measured - server's actual first-token delay; load avg {loadavg_start[0]:.2f}",
        flush=True,
    )
    results = []
    t_start = time.time()
    with DelayServers(a.server_procs, a.ttft_ms, a.itl_ms) as servers, CpuSampler(servers.pids) as sampler:
        for w in workers:
            print(f"workers={w}:", flush=True)
            # More workers should do at least as well: start the search at half the last result.
            start = (
                max(cfg.start_rate, results[-1]["best"]["rate"] / 2)
                if results and results[-1]["best"]
                else cfg.start_rate
            )
            results.append(search(cfg, servers, sampler, w, start, deadline, log_level))
    print()
    print_table(results)
    print(
        f"({time.time() - t_start:.0f} s; TTFT err = measured - server's actual first-token delay, "
        f"sustained = no errors, kept up, err P99 <= {ERR_P99_LIMIT_MS:g} ms)"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "config": {k: v for k, v in vars(cfg).items() if k != "json"},
                    "server": http_impl(),
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "loadavg_start": loadavg_start,
                    },
                    "definition": "ttft_err = client ttft - (server first chunk ready to send - server arrival)",
                    "results": results,
                },
                f,
                indent=1,
            )
        print(f"raw figures written to {a.json}")


if __name__ == "__main__":
    main()
