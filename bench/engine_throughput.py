"""What continuous batching and paging buy, and how far a step is from the matmul limit.

In one run, on the `tiny` preset in float32: (1) this machine's float32 matmul peak; (2) a
2048-token prefill step and a decode step at 64 sequences: MFU, scheduler + input prep share,
a profile of the decode and its attention against two candidate fixes; (3) the most sequences a
fixed KV budget holds, paged vs contiguous; (4) one workload (64 requests, seeded; prompts
32-512, outputs 16-256, greedy, ignore EOS) through refengine continuous (LLM("tiny"), default
args) and static batching, both also capped at 16 sequences, transformers generate in padded
static batches, and transformers continuous batching.

    python bench/engine_throughput.py [--quick] [--json bench/engine_throughput.json]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (
    FALLBACK_VARIANT,
    KERNEL_VARIANT,
    CpuMeter,
    StepRecorder,
    decode_attention_variants,
    greedy,
    machine,
    make_workload,
    matmul_peak,
    metered,
    model_flops,
    note,
    print_table,
    profile_breakdown,
    quietest,
    summarize_steps,
    verdict,
    write_json,
)

PAD = 3
FULL = dict(
    n=64,
    prompts=(32, 512),
    outputs=(16, 256),
    hf_bs=(16, 32),
    cap_seqs=16,
    cap_len=1024,
    cap_blocks=1200,
    cap_prompt=(464, 496),
    cap_out=32,
    cap_n=64,
    prefill=(4, 512),
    reps=3,
    dec_n=64,
    dec_steps=12,
    prof_steps=3,
)
QUICK = dict(
    n=8,
    prompts=(32, 128),
    outputs=(8, 32),
    hf_bs=(4, 8),
    cap_seqs=4,
    cap_len=256,
    cap_blocks=160,
    cap_prompt=(112, 124),
    cap_out=8,
    cap_n=24,
    prefill=(2, 256),
    reps=1,
    dec_n=16,
    dec_steps=3,
    prof_steps=1,
)
MM_SHAPES = [
    (2048, 5632, 1024),
    (2048, 1024, 2816),
    (2048, 1536, 1024),
    (64, 5632, 1024),
    (64, 1024, 2816),
    (64, 1536, 1024),
]


def run_refengine(reqs, **kw):
    from refengine import LLM

    llm = LLM("tiny", **kw)
    llm.generate([[7] * 16], greedy(4))  # warm-up, not timed
    rec = StepRecorder(llm.llm_engine)
    with CpuMeter() as m:
        outs = llm.generate([r.prompt for r in reqs], [greedy(r.max_tokens) for r in reqs])
    toks = [o.outputs[0].token_ids for o in outs]
    assert [len(x) for x in toks] == [r.max_tokens for r in reqs], "refengine did not produce max_tokens each"
    recs, sc = rec.records, llm.llm_engine.scheduler_config
    dec = [r for r in recs if r.num_decode == r.num_tokens]
    return dict(
        m.as_dict(),
        tokens=toks,
        steps=len(recs),
        peak_running=max(r.num_running for r in recs),
        mean_running=statistics.mean(r.num_running for r in recs),
        overhead_share_all_steps=sum(r.schedule_s + r.update_s + r.prepare_s for r in recs)
        / sum(r.total_s for r in recs),
        decode_only_steps=len(dec),
        decode_only_time_share=sum(r.total_s for r in dec) / sum(r.total_s for r in recs),
        decode_ms_per_token=1e3 * sum(r.total_s for r in dec) / max(1, sum(r.num_tokens for r in dec)),
        config=dict(kw, max_num_seqs=sc.max_num_seqs, max_num_batched_tokens=sc.max_num_batched_tokens),
    )


def _hf_batch(model, chunk):
    """One padded static batch: left padding + attention mask; max(output) new tokens, EOS held off."""
    width, n = max(len(r.prompt) for r in chunk), max(r.max_tokens for r in chunk)
    ids = torch.full((len(chunk), width), PAD)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for j, r in enumerate(chunk):
        ids[j, width - len(r.prompt) :] = torch.tensor(r.prompt)
        mask[j, width - len(r.prompt) :] = 1
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=PAD
        )
    return [out[j, width : width + r.max_tokens].tolist() for j, r in enumerate(chunk)]  # requested tokens only


def run_hf_generate(model, reqs, bs):
    with CpuMeter() as m:
        toks = [t for i in range(0, len(reqs), bs) for t in _hf_batch(model, reqs[i : i + bs])]
    return dict(m.as_dict(), tokens=toks)


def run_hf_cb(model, reqs):
    """transformers continuous batching: the manager generate_batch wraps, with per-request max_new_tokens."""
    from transformers import GenerationConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    top = max(r.max_tokens for r in reqs)
    cfg = GenerationConfig(max_new_tokens=top, do_sample=False, eos_token_id=-1, pad_token_id=PAD)
    hints = WorkloadHints(max(len(r.prompt) for r in reqs), top, len(reqs))
    t0 = time.perf_counter()
    with model.continuous_batching_context_manager(
        generation_config=cfg, block=True, timeout=60, workload_hints=hints
    ) as mgr:
        setup = time.perf_counter() - t0
        meter = CpuMeter().__enter__()
        ids = [mgr.add_request(r.prompt, max_new_tokens=r.max_tokens, eos_token_id=-1) for r in reqs]
        done = {}
        while len(done) < len(ids):
            res = mgr.get_result(timeout=1)
            if res is None and not mgr.is_running():
                raise RuntimeError(f"generation thread stopped with {len(done)}/{len(ids)} done")
            if res is not None and res.is_finished():
                if res.error:
                    raise RuntimeError(f"request {res.request_id}: {res.error}")
                done[res.request_id] = res
        meter.__exit__()
        cb = mgr.continuous_batching_config
    toks = [list(done[i].generated_tokens)[: r.max_tokens] for i, r in zip(ids, reqs)]
    return dict(
        meter.as_dict(),
        setup_s=setup,
        tokens=toks,
        cb_config=dict(page_size=cb.page_size, num_blocks=cb.num_blocks, max_batch_tokens=cb.max_batch_tokens),
    )


def capacity(layout, reqs, max_model_len, blocks):
    """Step the engine by hand until the first request finishes; peak of stats().num_running."""
    from refengine import LLM

    eng = LLM("tiny", max_model_len=max_model_len, num_gpu_blocks_override=blocks, kv_layout=layout).llm_engine
    for r in reqs:
        eng.add_request(r.prompt, greedy(r.max_tokens))
    peak, steps, usage = 0, 0, 0.0
    while eng.has_unfinished_requests():
        outs = eng.step()
        st = eng.stats()
        steps += 1
        if st.num_running > peak:
            peak, usage = st.num_running, st.kv_usage
        if any(o.finished for o in outs):
            break
    return dict(
        peak_running=peak,
        kv_usage_at_peak=usage,
        running_at_first_finish=st.num_running + sum(o.finished for o in outs),
        preemptions=st.num_preemptions_total,
        steps=steps,
        num_blocks=blocks,
    )


def probe(c, coef, peak, dec_reqs):
    """Prefill MFU (k x L prompt tokens in one step) and the decode step at dec_n running sequences."""
    from torch.profiler import ProfilerActivity, profile

    from refengine import LLM
    from refengine.attention.metadata import build_attention_metadata

    llm = LLM("tiny", max_num_seqs=max(64, c["dec_n"]))
    eng = llm.llm_engine
    rec = StepRecorder(eng)
    rng = random.Random(1)
    k, length = c["prefill"]
    for rep in range(c["reps"] + 1):  # rep 0 is a warm-up
        rec.enabled = rep > 0
        for _ in range(k):
            eng.add_request([rng.randrange(7, 4096) for _ in range(length)], greedy(1))
        while eng.has_unfinished_requests():
            eng.step()
    pre = [r for r in rec.records if r.num_decode == 0 and r.num_tokens == k * length]
    rec.records, rec.enabled = [], False
    for r in dec_reqs:  # long max_tokens: nobody finishes during the probe
        eng.add_request(r.prompt, greedy(1000))
    sch = eng.scheduler
    while not (
        len(sch.running) == c["dec_n"] and all(q.num_computed_tokens >= q.num_prompt_tokens for q in sch.running)
    ):
        eng.step()
    eng.step()
    rec.enabled = True
    for _ in range(c["dec_steps"]):
        eng.step()
    dec = [r for r in rec.records if r.num_decode == r.num_tokens == c["dec_n"]]
    rec.enabled = False
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for _ in range(c["prof_steps"]):
            eng.step()
        wall = time.perf_counter() - t
    prof_out = profile_breakdown(prof, wall, c["prof_steps"])
    # One layer's decode attention on the live cache: the engine's kernel, its PyTorch fallback, two fixes of it.
    kv, cfg = eng.runner.kv_caches[0], eng.model_config
    seqs = [(q.num_computed_tokens - 1, 1, sch.kv_cache_manager.get_block_ids(q)) for q in sch.running]
    slots = build_attention_metadata(seqs, eng.cache_config.block_size).decode_slots
    attn = dict(
        layers=cfg.num_hidden_layers,
        padded_slots=slots.numel(),
        context_slots=sum(s + 1 for s, _, _ in seqs),
        per_layer_s=decode_attention_variants(kv, seqs, cfg.num_attention_heads, eng.cache_config.block_size),
    )
    eng.abort_request(list(sch.requests))
    return dict(
        prefill=summarize_steps(pre, coef, peak),
        decode=summarize_steps(dec, coef, peak),
        profile=prof_out,
        attention=attn,
    )


def throughput(c, args, reqs, model_dir) -> dict:
    from transformers import LlamaForCausalLM

    systems, k = {}, c["cap_seqs"]
    for name, kw in (
        ("refengine continuous", {}),
        ("refengine static", {"batching": "static"}),
        (f"refengine continuous max_num_seqs={k}", {"max_num_seqs": k}),
        (f"refengine static max_num_seqs={k}", {"batching": "static", "max_num_seqs": k}),
    ):
        systems[name] = quietest(lambda: run_refengine(reqs, **kw), args.retries)
        note(f"{name}: {systems[name]['wall_s']:.1f} s")
        gc.collect()
    hf = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    run_hf_generate(hf, reqs[:2], 2)  # warm-up
    for bs in c["hf_bs"]:
        systems[f"transformers generate bs={bs}"] = r = dict(
            quietest(lambda: run_hf_generate(hf, reqs, bs), args.retries), batch_size=bs
        )
        note(f"transformers generate bs={bs}: {r['wall_s']:.1f} s")
    try:  # a fresh model: the CB manager switches the attention implementation
        hf = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        systems["transformers generate_batch (CB)"] = quietest(lambda: run_hf_cb(hf, reqs), args.retries)
    except Exception as exc:  # noqa: BLE001 - an optional comparison: record the exact error and move on
        systems["transformers generate_batch (CB)"] = dict(error=f"{type(exc).__name__}: {exc}")
    del hf
    gc.collect()
    return systems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small workload: a smoke test, not a measurement")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    ap.add_argument(
        "--retries",
        type=int,
        default=1,
        help="re-measure a system while other processes took "
        ">0.25 CPUs during it, at most this many times (default 1); the quietest attempt counts",
    )
    args = ap.parse_args()
    c = QUICK if args.quick else FULL
    from transformers.utils import logging as hf_logging

    from refengine.model.hf_config import load_model_config
    from refengine.model.tiny import resolve_model

    hf_logging.set_verbosity_error()
    model_dir = resolve_model("tiny")
    coef = model_flops(load_model_config(model_dir))
    res = dict(machine=machine(), config=c, model="tiny", flop_coefficients=coef)
    t_start = time.perf_counter()
    res["matmul"] = mm = quietest(lambda: metered(matmul_peak, MM_SHAPES, 0.5 if args.quick else 1.5), args.retries)
    peak = max(v for k, v in mm.items() if " @ " in k)
    # Step anatomy first, in a fresh process; the peak again right after it (the VM's speed drifts over a
    # long run): MFU divides by the higher of the two peaks.
    dec_reqs = make_workload(c["dec_n"], c["prompts"], c["outputs"], seed=0)
    res["probe"] = p = quietest(lambda: metered(probe, c, coef, peak, dec_reqs), args.retries)
    res["matmul_after_probe"] = mm2 = quietest(
        lambda: metered(matmul_peak, MM_SHAPES, 0.5 if args.quick else 1.5), args.retries
    )
    res["peak_flops"] = peak = max(peak, max(v for k, v in mm2.items() if " @ " in k))
    for kind in ("prefill", "decode"):
        p[kind]["mfu"] = p[kind]["gflops"] * 1e9 / peak
    rows = [
        [
            k,
            f"{v['step_s'] * 1e3:.0f}",
            v["tokens"],
            f"{v['gflop']:.1f}",
            f"{v['gflops']:.1f}",
            f"{v['mfu']:.1%}",
            f"{v['overhead_share']:.1%}",
        ]
        for k, v in (("prefill", p["prefill"]), (f"decode@{c['dec_n']}", p["decode"]))
    ]
    print_table(
        f"Step anatomy (matmul peak {peak / 1e9:.1f} GFLOP/s: best sustained F.linear, model shapes, "
        f"measured before and after these steps)",
        ["step", "ms", "tokens", "GFLOP", "GFLOP/s", "MFU", "sched+update+prepare"],
        rows,
    )
    prof = p["profile"]
    print_table(
        f"Decode step at {c['dec_n']} sequences, profiled ({prof['wall_s'] * 1e3:.0f} ms/step under profiler)",
        ["where", "ms/step", "share"],
        [[k, f"{v * 1e3:.1f}", f"{v / prof['wall_s']:.0%}"] for k, v in prof["categories_s"].items()],
    )
    a = p["attention"]
    base = a["per_layer_s"].get(KERNEL_VARIANT, a["per_layer_s"][FALLBACK_VARIANT])
    pad = 1 - a["context_slots"] / a["padded_slots"]
    print_table(
        f"Decode attention at {c['dec_n']} sequences, x {a['layers']} layers per step ({pad:.0%} of gathered "
        f"K/V slots are padding; {p['decode']['minor_faults']:.0f} minor page faults per decode step)",
        ["variant", "ms/step", "vs engine"],
        [[k, f"{v * a['layers'] * 1e3:.1f}", f"{base / v:.2f}x"] for k, v in a["per_layer_s"].items()],
    )
    cap_reqs = make_workload(c["cap_n"], c["cap_prompt"], (c["cap_out"], c["cap_out"]), seed=2)
    res["capacity"] = {lay: capacity(lay, cap_reqs, c["cap_len"], c["cap_blocks"]) for lay in ("paged", "contiguous")}
    gc.collect()
    print_table(
        f"KV capacity: {c['cap_blocks']} blocks of 16, max_model_len {c['cap_len']}, requests "
        f"{c['cap_prompt']}+{c['cap_out']} tokens",
        ["layout", "peak running", "running at first finish", "KV usage at peak", "preemptions"],
        [
            [k, v["peak_running"], v["running_at_first_finish"], f"{v['kv_usage_at_peak']:.0%}", v["preemptions"]]
            for k, v in res["capacity"].items()
        ],
    )
    reqs = make_workload(c["n"], c["prompts"], c["outputs"], seed=0)
    n_out = sum(r.max_tokens for r in reqs)
    res["workload"] = dict(n=len(reqs), prompt_tokens=sum(len(r.prompt) for r in reqs), output_tokens=n_out)
    res["systems"] = systems = throughput(c, args, reqs, model_dir)
    ref, rows = systems["refengine continuous"], []
    ref_tokens = ref["tokens"]
    for name, s in systems.items():
        if "error" in s:
            rows.append([name, "-", "-", "-", "-", "-", "error: " + s["error"][:60], "-"])
            continue
        s["tok_s"] = n_out / s["wall_s"]
        s["tokens_match_continuous"] = sum(a == b for a, b in zip(s.pop("tokens"), ref_tokens)) / len(reqs)
        rows.append(
            [
                name,
                f"{s['wall_s']:.1f}",
                f"{s['tok_s']:.1f}",
                f"{s['wall_s'] / ref['wall_s']:.2f}x",
                f"{s['mean_running']:.1f}" if "mean_running" in s else "-",
                f"{s['decode_ms_per_token']:.1f}" if "mean_running" in s else "-",
                f"{s['tokens_match_continuous']:.0%}",
                f"{s['other_cpus']:.2f}",
            ]
        )
    print_table(
        f"Throughput: {len(reqs)} requests, {n_out} requested output tokens",
        [
            "system",
            "wall s",
            "out tok/s",
            "continuous speed-up",
            "mean running",
            "decode ms/token",
            "same tokens as continuous",
            "others' CPUs",
        ],
        rows,
    )
    hf_best = max(
        (k for k in systems if k.startswith("transformers generate bs") and "tok_s" in systems[k]),
        key=lambda k: systems[k]["tok_s"],
    )
    res["hf_generate_best"] = hf_best
    cont, static, k = systems["refengine continuous"], systems["refengine static"], c["cap_seqs"]
    cb = systems["transformers generate_batch (CB)"]
    targets = [
        ("continuous / static >= 2x (default args: max_num_seqs 128)", cont["tok_s"] / static["tok_s"], 2.0, True),
        (
            f"continuous / static >= 2x (both max_num_seqs={k})",
            systems[f"refengine continuous max_num_seqs={k}"]["tok_s"]
            / systems[f"refengine static max_num_seqs={k}"]["tok_s"],
            2.0,
            True,
        ),
        (f"continuous / {hf_best} >= 1.5x", cont["tok_s"] / systems[hf_best]["tok_s"], 1.5, True),
        (
            "continuous / transformers CB >= 3x",
            cont["tok_s"] / cb["tok_s"] if "tok_s" in cb else float("nan"),
            3.0,
            True,
        ),
        (
            "paged / contiguous sequences >= 2x",
            res["capacity"]["paged"]["peak_running"] / res["capacity"]["contiguous"]["peak_running"],
            2.0,
            True,
        ),
        (f"sched+update+prepare share of decode step @{c['dec_n']} <= 10%", p["decode"]["overhead_share"], 0.10, False),
        ("MFU prefill >= 70%", p["prefill"]["mfu"], 0.70, True),
        (f"MFU decode @{c['dec_n']} >= 50%", p["decode"]["mfu"], 0.50, True),
    ]
    res["targets"] = [dict(target=t, value=v, met=verdict(v, th, hi) == "met") for t, v, th, hi in targets]
    print_table(
        "Targets",
        ["target", "measured", "verdict"],
        [[t, f"{v:.1%}" if th < 1 else f"{v:.2f}x", verdict(v, th, hi)] for t, v, th, hi in targets],
    )
    res["total_wall_s"] = time.perf_counter() - t_start
    busy = {
        k: v["other_cpus"]
        for k, v in [("matmul peak", mm), ("matmul peak 2", mm2), ("probe", p)]
        + [(k, v) for k, v in systems.items() if "other_cpus" in v]
        if v["other_cpus"] > 0.2
    }
    print(
        f"total {res['total_wall_s']:.0f} s; "
        + (
            f"WARNING other processes used CPU during {busy}"
            if busy
            else "no other process used a notable share of the CPUs"
        )
    )
    write_json(args.json, res)


if __name__ == "__main__":
    main()
