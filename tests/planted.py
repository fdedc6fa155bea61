"""Run directories with one planted cause of a bad P99 each, written through the run-directory
contract: a steady closed-loop level, then the cause laid over chosen time windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rundir import RequestRecord, RunDir, RunInfo

T0 = 1_800_000_000.0  # a fixed epoch, so windows are easy to read in failures
BASE_TTFT_S, TPOT_S, OUT = 0.100, 0.020, 32


def base_records(
    n: int = 600, concurrency: int = 8, seed: int = 0, prompt: int = 256, long_every: int = 0, long_prompt: int = 4096
) -> list[RequestRecord]:
    """Closed loop: `concurrency` users sending back to back with TTFT ~ 100 ms +- a little."""
    rng = np.random.default_rng(seed)
    recs, clocks = [], [T0 + 0.01 * u for u in range(concurrency)]
    for i in range(n):
        u = i % concurrency
        t_sent = clocks[u]
        is_long = bool(long_every) and i % long_every == long_every - 1
        ttft = BASE_TTFT_S * (1 + 0.1 * rng.random()) + (0.5 if is_long else 0.0)
        e2e = ttft + TPOT_S * (OUT - 1)
        r = RequestRecord(
            level_id="c8",
            concurrency=concurrency,
            request_rate=None,
            target_input_len=long_prompt if is_long else prompt,
            target_output_len=OUT,
            t_scheduled=t_sent,
            t_sent=t_sent,
            t_first_token=t_sent + ttft,
            t_done=t_sent + e2e,
            status="ok",
            in_window=True,
            prompt_tokens=long_prompt if is_long else prompt,
            completion_tokens=OUT,
            itl_s=[TPOT_S] * (OUT - 1),
        )
        recs.append(r.derive())
        clocks[u] = t_sent + e2e + 0.001
    return recs


def plant_head_of_line(recs: list[RequestRecord]) -> None:
    """Every third long prompt is prefilled in one 0.5 s step: short requests waiting during that
    step get their first token one step after it ends, as a non-chunked engine would give it."""
    blocking = [r.t_first_token for r in recs if r.prompt_tokens == 4096][::3]
    for r in recs:
        for t_end in blocking:
            if r.prompt_tokens != 4096 and r.t_sent < t_end < r.t_first_token + 0.5 and r.t_first_token < t_end:
                delay(r, t_end + 0.02 - r.t_first_token)


def delay(r: RequestRecord, extra_s: float) -> None:
    """Make a request's first token (and everything after it) `extra_s` later."""
    r.t_first_token += extra_s
    r.t_done += extra_s
    r.derive()


EPISODES = [(10.0, 11.5), (25.0, 26.5), (40.0, 41.5)]  # seconds after the first request


def delay_in_episodes(recs: list[RequestRecord], episodes=EPISODES, extra_s: float = 1.0) -> list[tuple[float, float]]:
    """Every request sent inside an episode waits `extra_s` more for its first token; returns the
    episodes as epoch windows."""
    t0 = recs[0].t_sent
    windows = [(t0 + a, t0 + b) for a, b in episodes]
    for r in recs:
        if any(s <= r.t_sent <= e for s, e in windows):
            delay(r, extra_s)
    return windows


def stalled(recs: list[RequestRecord], on: float, off: float, stall_s: float, keep_every: int) -> list[RequestRecord]:
    """A closed loop stalled from `on` to `off`: it sends few requests then (one in `keep_every` of
    those sent in the span is kept), and each waits `stall_s` more for its first token."""
    kept = []
    for i, r in enumerate(recs):
        if on <= r.t_sent <= off:
            if i % keep_every:
                continue
            delay(r, stall_s)
        kept.append(r)
    return kept


REMOTE_URL = "http://10.99.0.5:8000"  # a target across the network (not this host)


def write_run(
    path: Path,
    records: list[RequestRecord],
    probes: dict[str, list[dict]] | None = None,
    url: str = REMOTE_URL,
    slos: dict | None = None,
    target: dict | None = None,
) -> RunDir:
    """`target`: fields of run.json's target over the default (an external server at `url`)."""
    run = RunDir(path)
    t_end = max(r.t_done for r in records)
    levels = list(dict.fromkeys(r.level_id for r in records))
    run.create(
        RunInfo.from_dict(
            dict(
                run_id=path.name,
                command=["planted"],
                target={"url": url, "model": "m", "kind": "external", **(target or {})},
                sweep={},
                slos=slos or {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05},
                host={},
                tool_version="test",
                status="complete",
                started=T0,
                finished=t_end,
                levels_done=levels,
            )
        )
    )
    run.append_records(records)
    for name, rows in (probes or {}).items():
        f = run.probe_file(name)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run


def clean_probes(t_start: float, t_end: float, ncpu: int = 8) -> dict[str, list[dict]]:
    """One row a second of healthy probes: no retransmits, NIC IRQs spread, CPU half idle, no queue."""
    rng = np.random.default_rng(7)
    out: dict[str, list[dict]] = {"tcp": [], "irq": [], "host": [], "server": []}
    for t in np.arange(t_start, t_end + 1.0, 1.0):
        t = float(t)
        out["tcp"].append(
            {
                "t": t,
                "dt_s": 1.0,
                "Tcp.OutSegs": 1000,
                "Tcp.RetransSegs": 0,
                "TcpExt.TCPTimeouts": 0,
                "conns": 8,
                "conns_retrans": 0,
                "conns_rto": 0,
            }
        )
        out["irq"].append(
            {
                "t": t,
                "dt_s": 1.0,
                "ncpu": ncpu,
                "nic_irq_total": 2000,
                "nic_busiest_share": 0.16,
                "nic_busiest_cpu": int(rng.integers(ncpu)),
            }
        )
        out["host"].append(
            {
                "t": t,
                "cpu_pct": 40.0,
                "cpu_per_core_pct": [40.0] * ncpu,
                "server_cpu_cores": 3.0,
                "client_cpu_cores": 0.1,
                "others_cpu_cores": 0.1,
                "top_others": [],
            }
        )
        out["server"].append(
            {"t": t, "up": 1, "kv_usage": 0.5, "running": 8, "waiting": 0, "preemptions": 0, "preemptions_total": 0}
        )
    return out


def rows_in(rows: list[dict], windows: list[tuple[float, float]]) -> list[dict]:
    """The probe rows whose one-second interval overlaps any of `windows`."""
    return [r for r in rows if any(r["t"] - 1.0 < e and r["t"] > s for s, e in windows)]


def pause_server(recs: list[RequestRecord], at: float, seconds: float) -> None:
    """The whole server stopped at `at` for `seconds`: every token a request in flight then was still
    owed comes `seconds` later (a first token still to come, or the gap that spans `at` grows), and a
    request sent while it was stopped is served from when it went on."""
    for r in recs:
        if at < r.t_sent < at + seconds:
            delay(r, at + seconds - r.t_sent)
            continue
        if r.t_sent > at or r.t_done <= at:
            continue
        if r.t_first_token > at:
            delay(r, seconds)
            continue
        t = r.t_first_token
        for k, gap in enumerate(r.itl_s):
            if t + gap > at:
                r.itl_s[k] = gap + seconds
                break
            t += gap
        r.t_done += seconds
        r.derive()
