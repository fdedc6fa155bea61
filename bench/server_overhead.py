"""What the HTTP server costs: the same requests through `python -m refengine.server` vs `LLM.generate`.

Requests: prompts of random token ids (128 tokens), 64 output tokens each, greedy, ignore_eos, on
the `tiny` preset. Every run of every arm gets prompts of its own (seeded by arm and repetition):
both engines cache prefixes, and a prompt seen in an earlier run would be prefilled from the cache
(16 of 128 tokens computed), which once made the later repetitions 1.8x faster than the first and
the "best run" a measure of the prefix cache, not of the server. Concurrency 32: 64 requests streamed with httpx (at most 32 in flight) against
a server started with --max-num-seqs 32, vs LLM(max_num_seqs=32).generate(all 64). Concurrency 1:
the first 16 of those requests one at a time, vs LLM.generate of one request at a time (16, not
64, because a batch-of-one decode on 2 cores makes 64 take minutes per side). A third arm runs the
same LLM.generate on a worker thread (the server's engine runs on one) to separate what HTTP
costs from what running off the main thread costs. Arms are interleaved, --reps times each
(the VM's speed drifts by 10-20% over minutes), and each arm's best run counts. The server runs
as a subprocess on a free 127.0.0.1 port and is killed at the end.

    python bench/server_overhead.py [--quick] [--json bench/server_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (
    CpuMeter,
    greedy,
    machine,
    make_workload,
    note,
    print_table,
    proc_minflt,
    thread_cpu_s,
    verdict,
    write_json,
)

from rundir.ports import free_port

FULL = dict(n=64, n1=16, prompt=128, out=64, conc=32)
QUICK = dict(n=8, n1=2, prompt=32, out=8, conc=32)
HOST = "127.0.0.1"


def start_server(port: int, max_num_seqs: int, log):
    cmd = [
        sys.executable,
        "-m",
        "refengine.server",
        "--model",
        "tiny",
        "--host",
        HOST,
        "--port",
        str(port),
        "--max-num-seqs",
        str(max_num_seqs),
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    import httpx

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}; see {log.name}")
        try:
            if httpx.get(f"http://{HOST}:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError("the server did not become healthy within 180 s")


def stop_server(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def _stream_one(client, url: str, req) -> dict:
    body = {
        "model": "tiny",
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first, tokens, chunks = None, None, 0
    async with client.stream("POST", url, json=body, timeout=600) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            obj = json.loads(line[6:])
            if obj.get("choices"):
                chunks += 1
                first = first or time.perf_counter()
            if obj.get("usage"):
                tokens = obj["usage"]["completion_tokens"]
    return {
        "ttft_s": (first or time.perf_counter()) - t0,
        "latency_s": time.perf_counter() - t0,
        "tokens": tokens,
        "chunks": chunks,
    }


async def _drive(port: int, reqs, conc: int) -> list[dict]:
    import httpx

    sem = asyncio.Semaphore(conc)
    url = f"http://{HOST}:{port}/v1/completions"
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=conc, max_keepalive_connections=conc)) as client:

        async def one(r):
            async with sem:
                return await _stream_one(client, url, r)

        return await asyncio.gather(*(one(r) for r in reqs))


def via_server(port: int, pid: int, reqs, conc: int) -> dict:
    threads0, client0, f0 = thread_cpu_s(pid), os.times(), proc_minflt(pid)
    with CpuMeter(pids=[pid]) as m:
        res = asyncio.run(_drive(port, reqs, conc))
    faults = proc_minflt(pid) - f0
    threads = {t: c - threads0.get(t, 0.0) for t, c in thread_cpu_s(pid).items()}
    client = os.times()
    cpu = dict(
        client_s=client.user + client.system - client0.user - client0.system,
        server_main_thread_s=threads.pop(pid, 0.0),  # uvicorn's event loop: HTTP, SSE, JSON
        server_other_threads_s=sorted(threads.values(), reverse=True),
    )  # engine loop thread + torch pool
    toks = [r["tokens"] for r in res]
    assert toks == [r.max_tokens for r in reqs], f"server returned {toks[:5]}... tokens, expected max_tokens each"
    n = sum(toks)
    return dict(
        m.as_dict(),
        cpu=cpu,
        cpu_s=m.own_cpus * m.wall_s,
        minor_faults=faults,
        out_tokens=n,
        tok_s=n / m.wall_s,
        mean_ttft_s=sum(r["ttft_s"] for r in res) / len(res),
        mean_latency_s=sum(r["latency_s"] for r in res) / len(res),
        sse_chunks=sum(r["chunks"] for r in res),
    )


def direct(llm, reqs, one_at_a_time: bool, on_thread: bool = False) -> dict:
    batches = [[r] for r in reqs] if one_at_a_time else [reqs]
    outs, f0 = [], proc_minflt()

    def work():
        outs.extend(o for b in batches for o in llm.generate([r.prompt for r in b], [greedy(r.max_tokens) for r in b]))

    with CpuMeter() as m:
        if on_thread:
            t = threading.Thread(target=work)
            t.start()
            t.join()
        else:
            work()
    n = sum(len(o.outputs[0].token_ids) for o in outs)
    assert n == sum(r.max_tokens for r in reqs)
    return dict(
        m.as_dict(), cpu_s=m.own_cpus * m.wall_s, minor_faults=proc_minflt() - f0, out_tokens=n, tok_s=n / m.wall_s
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small workload: a smoke test, not a measurement")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    ap.add_argument("--no-c1", action="store_true", help="skip the concurrency-1 arms (about half the time)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions of each arm (default 3, quick 1)")
    args = ap.parse_args()
    c = QUICK if args.quick else FULL
    reps = args.reps or (1 if args.quick else 3)
    reqs = make_workload(c["n"], (c["prompt"], c["prompt"]), (c["out"], c["out"]), seed=3)

    def fresh(rep: int, arm: int, n: int):
        """The workload's shape with prompts no earlier run has seen (so none hits the prefix cache)."""
        return make_workload(n, (c["prompt"], c["prompt"]), (c["out"], c["out"]), seed=1000 + 100 * rep + arm)

    res = dict(machine=machine(), config=dict(c, reps=reps), model="tiny")
    t_start = time.perf_counter()
    from refengine import LLM

    port = free_port(HOST)
    with tempfile.NamedTemporaryFile("w", prefix="refengine-server-", suffix=".log", delete=False) as log:
        proc = start_server(port, c["conc"], log)
        try:
            asyncio.run(_drive(port, make_workload(1, (16, 16), (4, 4), seed=9), 1))  # warm-up
            llm = LLM("tiny", max_num_seqs=c["conc"])
            llm.generate([[7] * 16], greedy(4))  # warm-up
            n, n1 = c["n"], c["n1"]
            arms = {
                "direct c=1": lambda q: direct(llm, q(n1), one_at_a_time=True),
                "server c=1": lambda q: via_server(port, proc.pid, q(n1), 1),
                "direct c=32": lambda q: direct(llm, q(n), one_at_a_time=False),
                "direct on a worker thread c=32": lambda q: direct(llm, q(n), one_at_a_time=False, on_thread=True),
                "server c=32": lambda q: via_server(port, proc.pid, q(n), c["conc"]),
            }
            if args.no_c1:
                arms = {k: fn for k, fn in arms.items() if not k.endswith("c=1")}
            runs = {k: [] for k in arms}
            for rep in range(reps):
                for arm, (k, fn) in enumerate(arms.items()):
                    runs[k].append(fn(lambda count, rep=rep, arm=arm: fresh(rep, arm, count)))
                    note(f"{k}: {runs[k][-1]['tok_s']:.1f} tok/s")
        finally:
            stop_server(proc)
    res["server_exit_code"] = proc.returncode
    res["runs"] = runs
    res["best"] = best = {k: max(v, key=lambda r: r["tok_s"]) for k, v in runs.items()}
    rows = []
    for k, r in best.items():
        ref = best["direct c=1" if k.endswith("c=1") else "direct c=32"]
        cpu = r.get("cpu")
        rows.append(
            [
                k,
                len(reqs[: c["n1"]]) if k.endswith("c=1") else len(reqs),
                f"{r['tok_s']:.1f}",
                f"{r['tok_s'] / ref['tok_s']:.3f}",
                " ".join(f"{x['tok_s']:.0f}" for x in runs[k]),
                f"{r['cpu_s']:.0f}"
                + (f" (event loop {cpu['server_main_thread_s']:.1f}, client {cpu['client_s']:.1f})" if cpu else ""),
                f"{r['minor_faults'] / r['out_tokens']:.0f}",
                f"{max(x['other_cpus'] for x in runs[k]):.2f}",
            ]
        )
    print_table(
        f"Server vs direct LLM.generate (tiny, prompts {c['prompt']}, {c['out']} output tokens, greedy, ignore_eos)",
        [
            "arm",
            "requests",
            "best tok/s",
            "vs direct",
            "all runs tok/s",
            "CPU-s",
            "page faults / token",
            "others' CPUs",
        ],
        rows,
    )
    for conc in ("32",) if args.no_c1 else ("1", "32"):
        res[f"ratio_c{conc}"] = best[f"server c={conc}"]["tok_s"] / best[f"direct c={conc}"]["tok_s"]
    cost = 1 - res["ratio_c32"]
    res["target"] = dict(target="server costs <= 10% of throughput at concurrency 32", value=cost, met=cost <= 0.10)
    print(
        f"target: server cost at concurrency {c['conc']} <= 10%: {cost:.1%} -> {verdict(cost, 0.10, False)}"
        + ("" if args.no_c1 else f"; server c=1 costs {1 - res['ratio_c1']:.1%}")
    )
    res["total_wall_s"] = time.perf_counter() - t_start
    print(f"total {res['total_wall_s']:.0f} s; server log {log.name}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
