"""llmbench's load generator and guidellm side by side, in one run, against the same servers.

1. The known-delay server (tests/loadgen/delay_server.py through bench/loadgen_common.py: first
   token X ms after a request arrives, then one every Y ms, on absolute times). Each tool's error
   is what it measured minus the configured delay; the server's own lateness (its timer fired
   late, read from its /x_timings) is shown next to it, because it is in both tools' numbers.
2. `llmbench serve --model tiny` (python -m refengine.server): both tools at the same loads;
   their medians should agree within 5%.

Like with like (docs/metrics.md): TTFT is the same interval in both tools, from the moment the
request starts going out on its socket to the first streamed line that carries a token, on
time.time():
- llmbench: t_sent is when the request's first byte is written to the socket (a hook on gevent's
  socket.sendall, loadgen/locust_users.py); building the request and connecting come before it
  and count as send lag, not TTFT. t_first_token is when readline returned the first SSE line
  that carries a token, stamped before any parsing (loadgen/sse.py).
- guidellm 0.8.1 (backends/openai/http.py): request_start is when httpcore starts writing the
  request headers (its `send_request_headers.started` trace event); the first token is when
  httpx's aiter_lines yields the first line that carries one.
guidellm's "ITL" is a per-request mean, (last token - first token) / (tokens - 1), so it is
compared with the per-request mean of our gaps; our pooled gaps (our ITL) are shown too, for
llmbench only.

Fairness: the same prompt and output lengths, text prompts for both, the same warm-up and
window, closed loop with N streams. Per level the tools take turns (A B, then B A on the next
repeat) so both see the same load from whatever else runs on this machine; the table gives the
median over repeats (5 by default; and the best, i.e. the smallest, P50 error). Server and
client do not share cores: the servers run under `taskset -c SERVER_CORES`, guidellm under
`taskset -c CLIENT_CORES`, and this process pins itself (every thread) to CLIENT_CORES before
the runs, so llmbench's locust processes inherit that. guidellm starts up to 10 worker
processes by default (its settings.max_worker_processes); GUIDELLM__MAX_WORKER_PROCESSES limits
it to the number of client cores. Each run records the cores its processes were allowed and
seen on; the JSON's "host" has the CPU model, the load average at start and end and a float32
matmul rate, printed above the tables. Run it on a quiet machine. guidellm lives in a virtual
environment of its own because it pins packages (click, transformers) that llmbench's
environment must not get.

    python bench/vs_guidellm.py [--venv DIR] [--levels 1,16,64] [--repeats 5]
                                [--server-cores 0] [--client-cores 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cores import CoreWatch, check_cores, core_list, host_info, merge_cores, parse_cores, pin_this_process
from loadgen_common import ROOT, DelayServers

from loadgen import LevelSpec, TargetSpec, WorkloadOptions, make_workload, run_level
from loadgen.prompt_text import sizer_for_tokenizer
from rundir.ports import free_port

GUIDELLM_VERSION = "0.8.1"
# guidellm's cap on its worker processes (settings.py: Settings.max_worker_processes, default 10;
# pydantic-settings with env_prefix "GUIDELLM__"). Set to the number of client cores.
GUIDELLM_WORKERS_ENV = "GUIDELLM__MAX_WORKER_PROCESSES"


def ensure_guidellm(venv: str) -> str:
    """The guidellm executable in `venv`, installed there first when missing (the pinned CPU torch
    before guidellm, so pip does not pull a multi-GB CUDA build)."""
    exe = os.path.join(venv, "bin", "guidellm")
    if os.path.exists(exe):
        return exe
    print(f"installing guidellm {GUIDELLM_VERSION} into {venv} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "pip"), "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)
    subprocess.run(pip + [f"guidellm=={GUIDELLM_VERSION}"], check=True)
    return exe


# ----- one run of each tool: per-request TTFT, mean gap, pooled gaps, E2E (seconds) -------------


def run_llmbench(url: str, model: str, c: int, a, tokenizer_dir: str) -> dict:
    sizer = sizer_for_tokenizer(os.path.join(tokenizer_dir, "tokenizer.json"))
    options = WorkloadOptions(
        prompt_format="text",
        text_sizer=sizer.to_dict() if sizer else None,
        input_len=a.input_len,
        output_len=a.output_len,
    )
    spec = LevelSpec(
        f"c{c}",
        concurrency=c,
        input_len=a.input_len,
        output_len=a.output_len,
        warmup_s=a.warmup,
        duration_s=a.duration,
        request_timeout_s=60.0,
    )
    records: list = []
    with CoreWatch(a.server_pids) as watch:
        res = run_level(spec, TargetSpec(url, model), lambda level: make_workload(options), records.extend)
    ok = [r for r in records if r.in_window and r.status == "ok" and r.ttft_s is not None and r.itl_s]
    return {
        "n": len(ok),
        "errors": res.errors,
        "client_cpu_pct": res.client_cpu_percent,
        "ttft": [r.ttft_s for r in ok],
        "itl_mean": [sum(r.itl_s) / len(r.itl_s) for r in ok],
        "itl_pooled": [g for r in ok for g in r.itl_s],
        "e2e": [r.e2e_s for r in ok],
        "prompt_tokens": [r.prompt_tokens for r in ok if r.prompt_tokens is not None],
        "cores": watch.as_dict(),
    }


def run_guidellm(exe: str, url: str, model: str, c: int, a, tokenizer_dir: str, workdir: str) -> dict:
    out = os.path.join(workdir, f"guidellm-c{c}-{time.time():.0f}.json")
    scenario = {
        "spec": {
            "backend": {"kind": "openai_http", "target": url, "model": model, "request_format": "/v1/completions"},
            "profile": {"kind": "concurrent", "streams": [c], "warmup": a.warmup},
            "tokenizer": {"kind": "hf_auto", "model": tokenizer_dir},
            "data": [{"kind": "synthetic_text", "prompt_tokens": a.input_len, "output_tokens": a.output_len}],
            "constraints": [{"kind": "max_duration", "seconds": a.warmup + a.duration}],
            "outputs": [{"kind": "json", "path": out}],
        }
    }
    path = os.path.join(workdir, "scenario.json")
    with open(path, "w") as f:
        json.dump(scenario, f)
    # HF_HUB_OFFLINE: the tokenizer is a local directory; never try the network for it.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GUIDELLM__DEFAULT_RESULTS_DIR": workdir, **guidellm_env(a)}
    cmd = ["taskset", "-c", core_list(a.client_cores), exe, "run", "--config", path, "--disable-console-interactive"]
    with CoreWatch(a.server_pids) as watch:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"guidellm failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    bench = json.load(open(out))["benchmarks"][0]
    ok = [
        r
        for r in bench["requests"]["successful"]
        if r.get("time_to_first_token_ms") is not None and r.get("inter_token_latency_ms") is not None
    ]
    return {
        "n": len(ok),
        "errors": len(bench["requests"]["errored"]),
        "ttft": [r["time_to_first_token_ms"] / 1000 for r in ok],
        "itl_mean": [r["inter_token_latency_ms"] / 1000 for r in ok],
        "e2e": [r["request_latency"] for r in ok],
        "prompt_tokens": [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None],
        "cores": watch.as_dict(),
    }


def guidellm_env(a) -> dict:
    return {GUIDELLM_WORKERS_ENV: str(len(a.client_cores))}


# ----- statistics -------------------------------------------------------------------------------


def pct_ms(xs, q, minus_s=0.0):
    return round(1000 * (float(np.percentile(xs, q)) - minus_s), 3) if len(xs) else None


def error_stats(run: dict, ttft_s: float, itl_s: float) -> dict:
    s = {"n": run["n"], "errors": run["errors"]}
    for key, nominal in (("ttft", ttft_s), ("itl_mean", itl_s), ("itl_pooled", itl_s)):
        if run.get(key):
            s[f"{key}_err_p50_ms"] = pct_ms(run[key], 50, nominal)
            s[f"{key}_err_p99_ms"] = pct_ms(run[key], 99, nominal)
    return s


def server_lateness(timings, ttft_s: float) -> dict:
    late = [ready - arrival for arrival, ready, _written, _plen in timings]
    return {"server_late_p50_ms": pct_ms(late, 50, ttft_s), "server_late_p99_ms": pct_ms(late, 99, ttft_s)}


def combine(runs: list[dict]) -> dict:
    """Median over repeats of each statistic; `best_ttft_p50_ms` is the smallest P50 error."""
    keys = [k for k in runs[0] if k.endswith("_ms") or k == "n"]
    out = {
        k: round(statistics.median(r[k] for r in runs if r.get(k) is not None), 3)
        for k in keys
        if any(r.get(k) is not None for r in runs)
    }
    out["best_ttft_p50_ms"] = min(r["ttft_err_p50_ms"] for r in runs)
    out["repeats"] = len(runs)
    return out


# ----- the two phases ---------------------------------------------------------------------------


def delay_phase(a, exe: str, tokenizer_dir: str, workdir: str, cores_seen: dict) -> dict:
    results: dict = {}
    with DelayServers(1, a.ttft_ms, a.itl_ms, cores=core_list(a.server_cores)) as srv:
        a.server_pids = srv.pids
        ttft_s, itl_s = a.ttft_ms / 1000, a.itl_ms / 1000
        for rep in range(a.repeats):
            for c in a.levels:
                order = ["llmbench", "guidellm"] if rep % 2 == 0 else ["guidellm", "llmbench"]
                for tool in order:
                    srv.take_timings()  # drop whatever came before this run
                    run = (
                        run_llmbench(srv.url, "delay-model", c, a, tokenizer_dir)
                        if tool == "llmbench"
                        else run_guidellm(exe, srv.url, "delay-model", c, a, tokenizer_dir, workdir)
                    )
                    s = {**error_stats(run, ttft_s, itl_s), **server_lateness(srv.take_timings(), ttft_s)}
                    if run.get("client_cpu_pct") is not None:
                        s["client_cpu_pct"] = round(run["client_cpu_pct"], 1)
                    s["cores"] = run["cores"]
                    cores_seen[tool] = merge_cores(cores_seen.get(tool), run["cores"])
                    results.setdefault(str(c), {}).setdefault(tool, []).append(s)
                    print(f"delay c={c} rep {rep} {tool}: {s}", flush=True)
    return {
        c: {tool: {"runs": runs, **combine(runs)} for tool, runs in by_tool.items()} for c, by_tool in results.items()
    }


def serve_phase(a, exe: str, workdir: str, cores_seen: dict) -> dict:
    from refengine.model.tiny import resolve_model

    tok_dir = str(resolve_model(a.serve_model))
    port = free_port()
    log = open(os.path.join(workdir, "serve.log"), "w")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            core_list(a.server_cores),
            sys.executable,
            "-m",
            "refengine.server",
            "--model",
            a.serve_model,
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    a.server_pids = [proc.pid]  # taskset execs the server in its own process
    url, out = f"http://127.0.0.1:{port}", {}
    try:
        model = _wait_for_model(url, proc)
        for c in a.serve_levels:
            # Turns as on the delay server; each statistic is the median over repeats of each run's median.
            per_run: dict = {"llmbench": [], "guidellm": []}
            for rep in range(a.serve_repeats):
                for tool in ["llmbench", "guidellm"] if rep % 2 == 0 else ["guidellm", "llmbench"]:
                    per_run[tool].append(
                        run_llmbench(url, model, c, a, tok_dir)
                        if tool == "llmbench"
                        else run_guidellm(exe, url, model, c, a, tok_dir, workdir)
                    )
            row: dict = {
                "n": {t: sum(r["n"] for r in per_run[t]) for t in per_run},
                "prompt_tokens_p50": {
                    t: statistics.median(sum((r["prompt_tokens"] for r in per_run[t]), []) or [0]) for t in per_run
                },
            }
            out[str(c)] = row
            for t in per_run:
                for r in per_run[t]:
                    cores_seen[t] = merge_cores(cores_seen.get(t), r["cores"])
            if not all(r["n"] for t in per_run for r in per_run[t]):
                print(f"serve c={c}: a tool finished no request in the window: {row['n']}", flush=True)
                continue
            for key in ("ttft", "itl_mean", "e2e"):
                ours, theirs = (
                    statistics.median(statistics.median(r[key]) for r in per_run[t]) for t in ("llmbench", "guidellm")
                )
                row[key] = {
                    "llmbench_ms": round(1000 * ours, 3),
                    "guidellm_ms": round(1000 * theirs, 3),
                    "diff_pct": round(100 * (ours - theirs) / theirs, 2),
                }
            print(f"serve c={c}: {row}", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
    return out


def _wait_for_model(url: str, proc: subprocess.Popen, timeout_s: float = 180.0) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited during startup")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                return json.loads(r.read())["data"][0]["id"]
        except OSError:
            time.sleep(0.5)
    raise TimeoutError("the server did not start")


def markdown(out: dict) -> str:
    """The tables bench/RESULTS.md records: medians over repeats, milliseconds; the host above them."""
    lines = host_lines(out) + [
        "| streams | tool | n | TTFT err P50 / P99 | ITL (per-request mean) err P50 / P99 | "
        "our pooled ITL err P50 / P99 | best TTFT err P50 | server late P50 / P99 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c, by_tool in out["delay"].items():
        for tool, s in by_tool.items():
            pooled = (
                f"{s['itl_pooled_err_p50_ms']:.2f} / {s['itl_pooled_err_p99_ms']:.2f}"
                if "itl_pooled_err_p50_ms" in s
                else "—"
            )
            lines.append(
                f"| {c} | {tool} | {s['n']:.0f} | {s['ttft_err_p50_ms']:.2f} / {s['ttft_err_p99_ms']:.2f} | "
                f"{s['itl_mean_err_p50_ms']:.2f} / {s['itl_mean_err_p99_ms']:.2f} | {pooled} | "
                f"{s['best_ttft_p50_ms']:.2f} | {s['server_late_p50_ms']:.2f} / {s['server_late_p99_ms']:.2f} |"
            )
    if out.get("serve"):
        lines += [
            "",
            "| streams | median TTFT llmbench / guidellm (diff) | median ITL (per-request mean) | "
            "median E2E | n | prompt tokens (usage P50) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for c, row in out["serve"].items():
            if "ttft" not in row:
                continue
            cells = [
                f"{row[k]['llmbench_ms']:.2f} / {row[k]['guidellm_ms']:.2f} ({row[k]['diff_pct']:+.1f}%)"
                for k in ("ttft", "itl_mean", "e2e")
            ]
            pt = row.get("prompt_tokens_p50", {})
            lines.append(
                f"| {c} | " + " | ".join(cells) + f" | {row['n']['llmbench']} / {row['n']['guidellm']} | "
                f"{pt.get('llmbench', '?')} / {pt.get('guidellm', '?')} |"
            )
    return "\n".join(lines)


def host_lines(out: dict) -> list[str]:
    h = out.get("host")
    if not h:
        return []
    end = h.get("loadavg_end")
    lines = [
        f"Host: {h['cpu_model']}, {h['cores']} cores, float32 matmul {h['matmul_f32_gflops']} GFLOP/s "
        f"({h['matmul_shape']}, {h.get('torch_threads', '?')} threads); load average (1/5/15 min) "
        f"{'/'.join(map(str, h['loadavg_start']))} at start, {'/'.join(map(str, end)) if end else '?'} at end.",
        f"Server on cores {core_list(h['server_cores'])}, clients on cores {core_list(h['client_cores'])}; "
        f"guidellm {' '.join(f'{k}={v}' for k, v in out.get('guidellm', {}).get('env', {}).items())}.",
    ]
    for phase, by_tool in out.get("cores_seen", {}).items():
        cells = [
            f"{tool} client ran on {core_list(c['client']['ran_on'])} (allowed {core_list(c['client']['allowed'])}, "
            f"up to {c['client']['max_procs']} processes), server on {core_list(c['server']['ran_on'])} "
            f"(allowed {core_list(c['server']['allowed'])})"
            for tool, c in by_tool.items()
        ]
        if cells:
            lines.append(f"Cores seen, {phase}: " + "; ".join(cells) + ".")
    return lines + [""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", default=os.path.join(ROOT, "bench", ".venv-guidellm"))
    p.add_argument("--levels", default="1,16,64")
    p.add_argument("--serve-levels", default="1,16,64")
    p.add_argument("--serve-model", default="tiny", help="a built-in model: tiny, or tiny-test on a slow machine")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--serve-repeats", type=int, default=5)
    p.add_argument("--server-cores", default="0", help="cores the servers run on (taskset -c list: 0 or 0,2-3)")
    p.add_argument("--client-cores", default="1", help="cores both clients run on, disjoint from --server-cores")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--skip-serve", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--render", metavar="JSON", help="print the tables of an earlier --json and exit")
    a = p.parse_args()
    if a.render:
        print(markdown(json.load(open(a.render))))
        return
    a.levels = [int(x) for x in a.levels.split(",") if x]  # --levels "": the serve phase only
    a.serve_levels = [int(x) for x in a.serve_levels.split(",") if x]
    try:
        a.server_cores, a.client_cores = parse_cores(a.server_cores), parse_cores(a.client_cores)
    except ValueError:
        sys.exit(
            f"vs_guidellm: --server-cores {a.server_cores!r} / --client-cores {a.client_cores!r}: "
            "not a core list like 0 or 0,2-3"
        )
    problem = check_cores(a.server_cores, a.client_cores) or (
        None if shutil.which("taskset") else "taskset (util-linux) is not installed"
    )
    if problem:
        sys.exit(f"vs_guidellm: {problem}")
    exe = ensure_guidellm(a.venv)
    from refengine.model.tiny import resolve_model

    t0 = time.time()
    out: dict = {
        "config": dict(vars(a)),
        "host": host_info(a.server_cores, a.client_cores),
        "guidellm": {"version": GUIDELLM_VERSION, "env": guidellm_env(a)},
        "cores_seen": {},
    }
    print("\n".join(host_lines(out)[:2]), flush=True)
    pin_this_process(a.client_cores)  # the llmbench runs' locust processes inherit it
    a.server_pids = []
    with tempfile.TemporaryDirectory(prefix="vs-guidellm-") as workdir:
        if a.levels:
            out["delay"] = delay_phase(
                a, exe, str(resolve_model("tiny-test")), workdir, out["cores_seen"].setdefault("delay", {})
            )
        else:
            out["delay"] = {}
        _save(a.json, out)  # the delay phase's results survive a failing serve phase
        if not a.skip_serve and a.serve_levels:
            out["serve"] = serve_phase(a, exe, workdir, out["cores_seen"].setdefault("serve", {}))
    out["wall_s"] = round(time.time() - t0, 1)
    out["host"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    _save(a.json, out)
    print(markdown(out))


def _save(path: str | None, out: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
