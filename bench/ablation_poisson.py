"""What continuous batching and paging buy under an open-loop Poisson load, in process.

All-at-once submission (engine_throughput.py) hides both mechanisms on a CPU: every request is
there from the first step, so static and continuous batching form the same batch. Here requests
arrive on a Poisson clock whether or not the engine keeps up (open loop), so a static batch makes
newcomers wait for its slowest member, and a layout that holds fewer sequences queues them.

The offline engine is driven directly (no HTTP, so the server's own costs are not in these
figures): a loop adds every request whose arrival time has passed, runs one engine step, and
waits for the next arrival when idle. The clock (`--clock`): `wall`, or by default `cpu`, this
process's CPU seconds with torch on one thread, so that other tenants of a shared machine slow
the run down without changing its figures (the engine is then a one-core engine; idle time
jumps to the next arrival). Times run from each request's scheduled arrival (so a request arriving during a step waits for it, as it would behind a server):
TTFT = first token - arrival; TPOT = (finish - first token) / (tokens - 1); goodput = requests
per second of the measured window that met both SLOs (per request). Requests arriving in the
first `--warmup` seconds are not counted; the load stops arriving at the end of the window and
the engine drains.

1. continuous vs static batching at one rate near capacity (A, B, A, B: interleaved reps);
2. paged vs contiguous KV on a fixed block budget, rates stepped up: the highest rate served
   with no preemption and TTFT P99 within the SLO.

    python bench/ablation_poisson.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CpuMeter, greedy, machine, make_workload, print_table, write_json


class Clock:
    """Seconds since start: wall time, or this process's CPU time (see the module docstring).

    On the CPU clock an idle engine jumps to the next arrival instead of sleeping."""

    def __init__(self, kind: str):
        self.kind, self.offset = kind, 0.0
        self._read = time.perf_counter if kind == "wall" else time.process_time
        self.t0 = self._read()

    def now(self) -> float:
        return self._read() - self.t0 + self.offset

    def wait_until(self, t: float) -> None:
        if self.kind == "wall":
            time.sleep(max(0.0, t - self.now()))
        else:
            self.offset += max(0.0, t - self.now())


def run_open_loop(
    engine_kw: dict,
    rate: float,
    duration: float,
    warmup: float,
    prompts,
    outputs,
    seed: int,
    slo_ttft: float,
    slo_tpot: float,
    clock_kind: str = "cpu",
) -> dict:
    from refengine import LLM

    eng = LLM("tiny", **engine_kw).llm_engine
    eng.add_request([7] * 16, greedy(2))  # warm-up, not counted
    while eng.has_unfinished_requests():
        eng.step()
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= warmup + duration:
            break
        arrivals.append(t)
    reqs = make_workload(len(arrivals), prompts, outputs, seed=seed)
    first, done, ntok, arrival_of = {}, {}, {}, {}
    peak_running, nxt = 0, 0
    with CpuMeter() as meter:
        clock = Clock(clock_kind)
        while nxt < len(arrivals) or eng.has_unfinished_requests():
            now = clock.now()
            while nxt < len(arrivals) and arrivals[nxt] <= now:
                rid = eng.add_request(reqs[nxt].prompt, greedy(reqs[nxt].max_tokens), request_id=str(nxt))
                arrival_of[rid] = arrivals[nxt]
                nxt += 1
            if not eng.has_unfinished_requests():
                clock.wait_until(arrivals[nxt])
                continue
            outs = eng.step()
            now = clock.now()
            for o in outs:
                if o.new_token_ids and o.request_id not in first:
                    first[o.request_id] = now
                if o.finished:
                    done[o.request_id], ntok[o.request_id] = now, len(o.outputs[0].token_ids)
            peak_running = max(peak_running, eng.stats().num_running)
        wall = clock.now()
    st = eng.stats()
    measured = [r for r, a in arrival_of.items() if a >= warmup]
    ttft = np.array([first[r] - arrival_of[r] for r in measured])
    tpot = np.array([(done[r] - first[r]) / (ntok[r] - 1) for r in measured if ntok[r] > 1])
    ok = sum(
        1
        for r in measured
        if first[r] - arrival_of[r] <= slo_ttft and (ntok[r] < 2 or (done[r] - first[r]) / (ntok[r] - 1) <= slo_tpot)
    )
    out_tokens = sum(ntok[r] for r in measured)
    span = max(done[r] for r in measured) - warmup
    return dict(
        rate=rate,
        requests=len(measured),
        wall_s=wall,
        other_cpus=meter.as_dict()["other_cpus"],
        ttft_p50=float(np.percentile(ttft, 50)),
        ttft_p99=float(np.percentile(ttft, 99)),
        tpot_p50=float(np.percentile(tpot, 50)),
        tpot_p95=float(np.percentile(tpot, 95)),
        goodput_rps=ok / duration,
        slo_met=ok / len(measured),
        out_tok_s=out_tokens / span,
        preemptions=st.num_preemptions_total,
        peak_running=peak_running,
        steps=st.num_steps,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", type=float, default=1.5, help="req/s for continuous vs static (near capacity)")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rates", default="0.5,1,1.5,2,3", help="req/s steps for paged vs contiguous")
    ap.add_argument("--kv-blocks", type=int, default=320, help="KV budget (blocks of 16) for paged vs contiguous")
    ap.add_argument("--slo-ttft", type=float, default=2.0)
    ap.add_argument("--slo-tpot", type=float, default=0.25)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--part", choices=("both", "batching", "layout"), default="both")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.clock == "cpu":
        import torch

        torch.set_num_threads(1)  # one thread: its CPU time is the engine's work, no spin-waits
    if args.quick:
        args.duration, args.warmup, args.reps, args.rates = 10.0, 2.0, 1, "1,2"
    prompts, outputs = (32, 256), (16, 128)
    slo = dict(slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot)
    res = dict(
        machine=machine(), args=vars(args), workload=dict(prompts=prompts, outputs=outputs), batching=[], layout=[]
    )
    slo["clock_kind"] = args.clock
    for rep in range(args.reps if args.part != "layout" else 0):
        for mode in ("continuous", "static"):
            r = run_open_loop(
                {"batching": mode}, args.rate, args.duration, args.warmup, prompts, outputs, seed=rep, **slo
            )
            res["batching"].append(dict(r, mode=mode, rep=rep))
            print(f"{mode} rep {rep}: {r}", flush=True)
    rows = [
        [
            b["mode"],
            b["rep"],
            b["requests"],
            f"{b['ttft_p50']:.2f}",
            f"{b['ttft_p99']:.2f}",
            f"{b['tpot_p50'] * 1e3:.0f}",
            f"{b['tpot_p95'] * 1e3:.0f}",
            f"{b['goodput_rps']:.2f}",
            f"{b['slo_met']:.0%}",
            f"{b['out_tok_s']:.0f}",
            f"{b['other_cpus']:.2f}",
        ]
        for b in res["batching"]
    ]
    if rows:
        print_table(
            f"Continuous vs static, Poisson {args.rate} req/s, {args.duration:.0f} s window (SLO TTFT <= "
            f"{args.slo_ttft} s, TPOT <= {args.slo_tpot * 1e3:.0f} ms)",
            [
                "batching",
                "rep",
                "requests",
                "TTFT P50 s",
                "TTFT P99 s",
                "TPOT P50 ms",
                "TPOT P95 ms",
                "goodput req/s",
                "met SLO",
                "out tok/s",
                "others' CPUs",
            ],
            rows,
        )
    kv = dict(num_gpu_blocks_override=args.kv_blocks, max_model_len=1024)
    for rate in (float(x) for x in args.rates.split(",") if args.part != "batching"):
        for layout in ("paged", "contiguous"):
            r = run_open_loop(
                dict(kv, kv_layout=layout), rate, args.duration, args.warmup, prompts, outputs, seed=100, **slo
            )
            r["served"] = r["preemptions"] == 0 and r["ttft_p99"] <= args.slo_ttft
            res["layout"].append(dict(r, layout=layout))
            print(f"{layout} {rate}: {r}", flush=True)
    rows = [
        [
            x["layout"],
            x["rate"],
            x["peak_running"],
            x["preemptions"],
            f"{x['ttft_p50']:.2f}",
            f"{x['ttft_p99']:.2f}",
            f"{x['tpot_p95'] * 1e3:.0f}",
            f"{x['goodput_rps']:.2f}",
            "yes" if x["served"] else "no",
        ]
        for x in res["layout"]
    ]
    if rows:
        print_table(
            f"Paged vs contiguous, {args.kv_blocks} blocks of 16, max_model_len 1024",
            [
                "layout",
                "req/s",
                "peak running",
                "preemptions",
                "TTFT P50 s",
                "TTFT P99 s",
                "TPOT P95 ms",
                "goodput req/s",
                "served",
            ],
            rows,
        )
    for layout in ("paged", "contiguous") if res["layout"] else ():
        served = [x["rate"] for x in res["layout"] if x["layout"] == layout and x["served"]]
        res[f"highest_served_{layout}"] = max(served) if served else None
        print(f"highest rate served without preemption ({layout}): {res[f'highest_served_{layout}']}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
