"""A synthetic run for the report's tests: four levels (benign token differences in every one, an
error, a level that served nobody), curated and unknown probes, and optionally a P99 diagnosis
with two spike windows."""

import json

from synth_run import T0, make_run, rec

from reports.write import write_reports

EVIL = "<script>alert(1)</script>"
SPIKES = [(1.0, 1.3), (6.2, 6.6)]  # seconds after T0


def _records(slow: float = 1.0):
    records = []
    for c, base in ((1, 0.1), (4, 0.3), (16, 0.6)):
        start = {1: 0, 4: 5, 16: 10}[c]
        for i in range(40):
            ttft = (base + 0.01 * (i % 7)) * (slow if c > 1 else 1.0)  # c1 the same in both runs
            r = rec(
                start + i * 0.1, ttft, ttft + 0.4 + 0.01 * (i % 5), 11, level=f"c{c}", concurrency=c, itl=[0.04] * 9
            )
            r.client_token_chunks = 10  # 11 tokens in 10 chunks: benign, said once
            r.client_completion_tokens = 13  # the client's tokenizer counts more: benign, said once
            records.append(r)
    records.append(
        rec(
            6,
            None,
            None,
            11,
            status="error",
            level="c4",
            concurrency=4,
            kind="http_status",
            error='HTTP 500 <img src="http://evil.example/x.png" onerror="alert(2)">',
        )
    )
    records += [
        rec(
            16 + i * 0.1,
            None,
            None,
            11,
            status="error",
            level="c32",
            concurrency=32,
            kind="connect",
            error="connection refused",
        )
        for i in range(5)
    ]
    return records


def _probes(run):
    rows = {
        "custom": [
            {"t": T0 + i, "util": {"gpu0": i % 3, "gpu1": 2.0}, "state": EVIL, "temp_c": 40 + i} for i in range(10)
        ],
        "server": [
            {
                "t": T0 + i * 0.5,
                "up": 1,
                "engine": "refengine",
                "kv_usage": 0.1 + 0.02 * i,
                "running": i % 5,
                "waiting": max(0, i - 20),
                "preemptions": 0,
                "scrape_s": 0.01,
            }
            for i in range(40)
        ],
        "host": [
            {
                "t": T0 + i * 0.5,
                "cpu_pct": 50 + i,
                "cpu_per_core_pct": [40 + i, 60],
                "server_cpu_cores": 0.8,
                "client_cpu_cores": 0.1 * (i % 3),
                "others_cpu_cores": 0.05,
                "mem_total_bytes": 2**34,
                "mem_used_bytes": 2**32 + i * 2**20,
                "load1": 1.0 + i,
                "load5": 2.0,
            }
            for i in range(40)
        ],
        "gpu": [
            {
                "t": T0 + i * 0.5,
                "gpus": [
                    {
                        "index": g,
                        "name": "H200",
                        "util_gpu_pct": 50 + i + g,
                        "mem_used_bytes": (40 + i) * 2**30,
                        "mem_total_bytes": 141 * 2**30,
                        "power_w": 300 + 5 * i,
                        "power_limit_w": 700,
                        "sm_clock_mhz": 1980 - i,
                        "temp_c": 50 + i % 4,
                        "throttle_mask": 0x4 if 10 <= i < 20 else 0,
                        "throttle_reasons": ["sw_power_cap"] if 10 <= i < 20 else [],
                    }
                    for g in (0, 1)
                ],
                "xid_events": [],
            }
            for i in range(40)
        ],
        "tcp": [
            {
                "t": T0 + i * 0.5,
                "dt_s": 0.5,
                "Tcp.OutSegs": 100 + i,
                "Tcp.InSegs": 90,
                "Tcp.RetransSegs": i % 3,
                "conns": 4,
                "conns_retrans_total": i // 4,
                "conns_rtt_ms_mean": 0.1 + 0.01 * i,
                "conns_rtt_ms_max": 0.3 + 0.02 * i,
            }
            for i in range(40)
        ],
        "irq": [
            {
                "t": T0 + i * 0.5,
                "dt_s": 0.5,
                "ncpu": 2,
                "irq_per_cpu": [10 + i, 5],
                "nic_irq_per_cpu": [i, 0],
                "nic_irq_total": i,
                "nic_busiest_cpu": 0,
                "nic_busiest_share": 1.0,
                "devices": {},
            }
            for i in range(40)
        ],
    }
    for name, rs in rows.items():
        (run.path / "probes" / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rs) + "\n")


def _diagnosis(run):
    spikes = [{"start": T0 + a, "end": T0 + b} for a, b in SPIKES]
    run.write_json(
        run.diagnosis_p99_json,
        {
            "run_id": run.path.name,
            "metric": "ttft",
            "headline": "long prefills blocked short requests",
            "span": {"start": T0, "end": T0 + 20},
            "spike_windows": spikes,
            "spike_seconds": 0.7,
            "calm_seconds": 19.3,
            "levels": [],
            "checks": [],
            "playbook": None,
            "findings": [
                {
                    "check_id": "p99.sched.long-prefill",
                    "category": "scheduling",
                    "severity": "high",
                    "title": "long prefills blocked short requests",
                    "evidence": {"prefill_p99_s": 0.42, "short_ttft_ratio": 3.1},
                    "explains": spikes[:1],
                    "spike_windows": 2,
                    "next_step": "cap long prefills (--long-prefill-token-threshold)",
                    "coverage": 0.5,
                }
            ],
        },
    )


def make_report(path, diagnosed: bool, slow: float = 1.0):
    windows = {"c1": (0, 4), "c4": (5, 9), "c16": (10, 14), "c32": (16, 17)}
    run = make_run(path, _records(slow), windows, model=EVIL)
    _probes(run)
    if diagnosed:
        _diagnosis(run)
    _, paths = write_reports(run)
    return run, paths
