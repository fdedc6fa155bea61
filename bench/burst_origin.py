"""Where do the bursts of short streams come from on this 2-core host?

The diagnosis family's "clean" draws (an embedded tiny-test, no plant) were named `p99.client-lag`
first: many 8-token streams arrived in one burst (analyzers/bursts.py) on a host that was ~10% busy.
Is the client falling behind, the server's HTTP side holding tokens its engine made (its event loop
waiting for the GIL behind the compute thread), or the server and the client on the same cores?
One invocation measures side by side, each variant its own server and the same open loop (8 req/s,
64-token prompts, 8-token outputs, a 20-s window), and reads what `llmdiag p99` says of it:

- pinned: the server on core 0, the load generator on core 1 (taskset), as bench/ compares clients;
- shared: neither pinned, as the family runs them;
- shared, one torch thread: the server with OMP_NUM_THREADS=1 (no second OpenMP worker on the
  client's core);
- shared, 0.5 ms GIL switch: the server's interpreter hands the GIL over every 0.5 ms instead of 5,
  so its event loop waits less behind the compute thread;
- pinned, client starved: as pinned, with two busy loops on the client's core (a client that does
  fall behind, the case analyzers/bursts.py was built for).

Per variant: streams read in one burst (the rule of analyzers/bursts.py, against the server's own
ITL), TTFT P50/P99, the host's median CPU busy, the load generator's and the server's own run-queue
wait (the host probe's client_cpu_wait_share, server_cpu_wait_share: of their runnable time, the
share spent waiting for a CPU), and the diagnosis's first finding.

    python bench/burst_origin.py --out bench/burst_origin.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.bursts import level_bursts, level_server_itl
from analyzers.probe_series import read_probe
from bench.cores import host_info
from bench.diagnosis_accuracy import finish, sweep
from bench.loopback_server import stop, wait_healthy
from rundir import RunDir
from rundir.ports import free_port
from rundir.table import RequestTable

SWITCH = (
    "import runpy, sys; sys.setswitchinterval({s}); sys.argv = ['refengine.server', *sys.argv[1:]]; "
    "runpy.run_module('refengine.server', run_name='__main__')"
)
VARIANTS: dict[str, dict] = {
    "pinned": {"server_cores": "0", "client_cores": "1", "env": {}, "switch_s": None},
    "shared": {"server_cores": None, "client_cores": None, "env": {}, "switch_s": None},
    "shared, one torch thread": {
        "server_cores": None,
        "client_cores": None,
        "env": {"OMP_NUM_THREADS": "1"},
        "switch_s": None,
    },
    "pinned, client starved": {"server_cores": "0", "client_cores": "1", "env": {}, "switch_s": None, "burn": "1"},
    "shared, 0.5 ms GIL switch": {"server_cores": None, "client_cores": None, "env": {}, "switch_s": 0.0005},
}


def serve(v: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    pin = ["taskset", "-c", v["server_cores"]] if v["server_cores"] else []
    head = (
        [sys.executable, "-c", SWITCH.format(s=v["switch_s"])]
        if v["switch_s"]
        else [sys.executable, "-m", "refengine.server"]
    )
    proc = subprocess.Popen(
        [*pin, *head, "--model", "tiny-test", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **v["env"]},
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    return proc, url


BURN = "while True: pass"


def measure(name: str, v: dict, work: Path, args) -> dict:
    proc, url = serve(v)
    burners = [
        subprocess.Popen(["taskset", "-c", v["burn"], sys.executable, "-c", BURN])
        for _ in range(2 if v.get("burn") else 0)
    ]
    out = work / name.replace(" ", "_").replace(",", "").replace(".", "")
    pin = ["taskset", "-c", v["client_cores"]] if v["client_cores"] else []
    try:
        # The bench's own sweep call (the real CLI behind taskset where the variant pins the client).
        finish(
            sweep(
                out,
                ["--target", url, "--model", "tiny-test", "--request-rate", str(args.rate), "--input-len", "64"]
                + ["--output-len", "8", "--duration", args.duration, "--warmup", "2s", "--probes", "host,server"],
                prefix=pin,
            ),
            timeout_s=600,
        )
    finally:
        stop(proc)
        for b in burners:
            b.kill()
            b.wait()
    diag = subprocess.run(
        [sys.executable, "-m", "llmbench.diag_cli", "p99", str(out)], capture_output=True, text=True, timeout=300
    )
    run = RunDir(out)
    table = RequestTable.load(run)
    rows = np.arange(len(table.df))
    server = read_probe(run.probe_file("server"), "server")
    itl = level_server_itl(server, table, rows)
    bursts = level_bursts(table, rows, itl)
    df = table.df
    ok = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy()
    ttft = df["ttft_s"].to_numpy(float)[ok]
    host = [json.loads(line) for line in (out / "probes" / "host.jsonl").read_text().splitlines() if line.strip()]
    busy = [r["cpu_pct"] for r in host if r.get("cpu_pct") is not None]

    def median(field: str) -> float | None:
        got = [r[field] for r in host if r.get(field) is not None]
        return round(float(np.median(got)), 3) if got else None

    first = json.loads((out / "diagnosis_p99.json").read_text())["findings"] if diag.returncode == 0 else None
    return {
        "variant": name,
        "streams_judged": bursts.judged,
        "streams_in_one_burst": bursts.bursts,
        "server_itl_mean_ms": None if itl is None else round(itl * 1000, 3),
        "ttft_p50_ms": round(float(np.percentile(ttft, 50)) * 1000, 2),
        "ttft_p99_ms": round(float(np.percentile(ttft, 99)) * 1000, 2),
        "requests": int(ok.sum()),
        "host_cpu_busy_pct_median": round(float(np.median(busy)), 1) if busy else None,
        "client_cpu_wait_share_median": median("client_cpu_wait_share"),
        "server_cpu_wait_share_median": median("server_cpu_wait_share"),
        "first_finding": (first[0]["check_id"] if first else "nothing") if first is not None else "diagnosis failed",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=8.0, help="requests per second of the open loop")
    ap.add_argument("--duration", default="20s", help="each variant's measured window")
    ap.add_argument("--out", default=str(Path(__file__).with_name("burst_origin.json")))
    args = ap.parse_args()
    started = time.time()
    host = host_info([0], [1])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, v in VARIANTS.items():
            r = measure(name, v, Path(tmp), args)
            print(json.dumps(r), flush=True)
            results.append(r)
    host["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "bench": "burst_origin",
        "command": " ".join(sys.argv),
        "host": host,
        "wall_s": round(time.time() - started),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(
        "| variant | streams in one burst | TTFT P50 ms | TTFT P99 ms | host CPU busy | client waited | "
        "server waited | first finding |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['variant']} | {r['streams_in_one_burst']} of {r['streams_judged']} | {r['ttft_p50_ms']} | "
            f"{r['ttft_p99_ms']} | {r['host_cpu_busy_pct_median']}% | {r['client_cpu_wait_share_median']} | "
            f"{r['server_cpu_wait_share_median']} | {r['first_finding']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
