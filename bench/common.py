"""Helpers shared by the bench scripts: workloads, step instrumentation, FLOP counting, tables.

Nothing here changes the engine: `StepRecorder` wraps the bound methods of one engine instance
(instance attributes shadow the class methods) and only reads clocks and the SchedulerOutput.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import resource
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

SPECIAL_IDS = 7  # ids 0..6 are <unk> <s> </s> <pad> and the chat markers


@dataclass
class Req:
    prompt: list[int]
    max_tokens: int


def make_workload(
    n: int, prompt_range: tuple[int, int], output_range: tuple[int, int], seed: int = 0, vocab: int = 4096
) -> list[Req]:
    """n requests, uniform prompt and output lengths, random non-special token ids (seeded)."""
    rng = random.Random(seed)
    return [
        Req([rng.randrange(SPECIAL_IDS, vocab) for _ in range(rng.randint(*prompt_range))], rng.randint(*output_range))
        for _ in range(n)
    ]


def greedy(max_tokens: int):
    from refengine import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


# ----- per-step instrumentation ------------------------------------------------------------


@dataclass
class StepRecord:
    total_s: float
    schedule_s: float
    update_s: float
    execute_s: float
    prepare_s: float
    forward_s: float
    sample_s: float
    num_running: int  # requests scheduled in this step
    num_tokens: int  # tokens computed this step
    num_decode: int  # scheduled requests with exactly one new token
    num_sampled: int
    attn_ctx_sum: int  # sum over computed tokens of their context length (keys attended)
    minor_faults: int


@dataclass
class StepRecorder:
    """Wraps engine.step / scheduler.schedule / update_from_output / runner.execute_model."""

    engine: object
    records: list[StepRecord] = field(default_factory=list)
    enabled: bool = True

    def __post_init__(self):
        eng, sch, run = self.engine, self.engine.scheduler, self.engine.runner
        self._t = {}
        self._sched_out = None
        orig_step, orig_sched, orig_upd, orig_exec = eng.step, sch.schedule, sch.update_from_output, run.execute_model

        def schedule():
            t = time.perf_counter()
            out = orig_sched()
            self._t["schedule"] = time.perf_counter() - t
            self._sched_out = out
            return out

        def update(a, b):
            t = time.perf_counter()
            out = orig_upd(a, b)
            self._t["update"] = time.perf_counter() - t
            return out

        def execute(s):
            t = time.perf_counter()
            out = orig_exec(s)
            self._t["execute"] = time.perf_counter() - t
            return out

        def step():
            self._t = {}
            self._sched_out = None
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            out = orig_step()
            total = time.perf_counter() - t
            s = self._sched_out
            if self.enabled and s is not None and not s.is_empty:
                tm = run.last_timings
                ctx = sum(r.num_tokens * r.start_pos + r.num_tokens * (r.num_tokens + 1) // 2 for r in s.requests)
                self.records.append(
                    StepRecord(
                        total,
                        self._t.get("schedule", 0.0),
                        self._t.get("update", 0.0),
                        self._t.get("execute", 0.0),
                        tm.prepare_s,
                        tm.forward_s,
                        tm.sample_s,
                        len(s.requests),
                        s.total_num_scheduled_tokens,
                        sum(1 for r in s.requests if r.num_tokens == 1),
                        sum(1 for r in s.requests if r.sample),
                        ctx,
                        resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                    )
                )
            return out

        eng.step, sch.schedule, sch.update_from_output, run.execute_model = step, schedule, update, execute


# ----- how busy the machine was with other work -------------------------------------------


def _proc_cpu_s(pid: str | int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def proc_minflt(pid: str | int = "self") -> int:
    """Minor page faults of a process so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process (tid -> s); the main thread's tid is the pid."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        out[int(tid)] = _proc_cpu_s(f"{pid}/task/{tid}")
    return out


class CpuMeter:
    """Wall time, our CPU time (this process + given pids) and everyone else's, in CPUs busy.

    `others` > ~0.2 means another process shared the 2 cores and the timing is suspect."""

    def __init__(self, pids=()):
        self.pids = ["self", *pids]

    def __enter__(self):
        self.t0, self.m0 = time.perf_counter(), _machine_busy_s()
        self.o0 = sum(_proc_cpu_s(p) for p in self.pids)
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self.t0
        own = sum(_proc_cpu_s(p) for p in self.pids) - self.o0
        self.own_cpus = own / self.wall_s
        self.other_cpus = max(0.0, (_machine_busy_s() - self.m0 - own) / self.wall_s)
        return False

    def as_dict(self) -> dict:
        return {"wall_s": self.wall_s, "own_cpus": self.own_cpus, "other_cpus": self.other_cpus}


def metered(fn, *a) -> dict:
    """fn(*a) (a dict) plus wall time and CPU use while it ran."""
    with CpuMeter() as m:
        out = fn(*a)
    return dict(out, **m.as_dict())


def quietest(fn, retries: int = 1, threshold: float = 0.25) -> dict:
    """Run a measurement (a dict with wall_s and other_cpus); while other processes took more than
    `threshold` CPUs, run it again (at most `retries` times) and keep the least disturbed attempt."""
    best = fn()
    attempts = [(best["wall_s"], best["other_cpus"])]
    while best["other_cpus"] > threshold and len(attempts) <= retries:
        note(f"others used {best['other_cpus']:.2f} CPUs during that measurement; measuring again")
        r = fn()
        attempts.append((r["wall_s"], r["other_cpus"]))
        best = r if r["other_cpus"] < best["other_cpus"] else best
    best["attempts_wall_s_other_cpus"] = attempts
    return best


def note(msg: str) -> None:
    import sys

    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----- FLOPs and the matmul peak -------------------------------------------------------------


def model_flops(cfg) -> dict:
    """Per-token / per-row FLOP coefficients of a Llama-family config (refengine ModelConfig)."""
    h, L, d = cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim
    q, kv, inter = cfg.num_attention_heads * d, cfg.num_key_value_heads * d, cfg.intermediate_size
    nonemb = L * (h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h) + h  # linears + norms
    return {
        "nonemb_params": nonemb,
        "per_token": 2 * nonemb,
        "attn_per_ctx": 2 * 2 * d * cfg.num_attention_heads * L,  # QK^T + PV per (query, key)
        "lm_head_per_row": 2 * h * cfg.vocab_size,
    }


def step_flops(rec: StepRecord, coef: dict) -> float:
    return (
        coef["per_token"] * rec.num_tokens
        + coef["attn_per_ctx"] * rec.attn_ctx_sum
        + coef["lm_head_per_row"] * rec.num_sampled
    )


def summarize_steps(rs: list[StepRecord], coef: dict, peak: float) -> dict:
    """Medians over steps of one kind: time, FLOPs, MFU against `peak`, and where the time went."""
    import statistics

    tot = statistics.median(r.total_s for r in rs)
    fl = statistics.median(step_flops(r, coef) for r in rs)
    part = {
        p: statistics.median(getattr(r, p) for r in rs)
        for p in ("schedule_s", "update_s", "prepare_s", "forward_s", "sample_s", "execute_s")
    }
    part["output_processing_s"] = max(0.0, tot - part["schedule_s"] - part["update_s"] - part["execute_s"])
    return dict(
        steps=len(rs),
        step_s=tot,
        gflop=fl / 1e9,
        gflops=fl / tot / 1e9,
        mfu=fl / tot / peak,
        tokens=rs[0].num_tokens,
        minor_faults=statistics.median(r.minor_faults for r in rs),
        overhead_share=(part["schedule_s"] + part["update_s"] + part["prepare_s"]) / tot,
        parts=part,
    )


KERNEL_VARIANT = "engine: C++ paged decode kernel"
FALLBACK_VARIANT = "PyTorch path (gather + SDPA enable_gqa)"


def decode_attention_variants(kv_cache, seqs, num_heads: int, block_size: int, n: int = 10) -> dict:
    """One layer's decode attention over the live cache: the engine's C++ paged decode kernel (its
    default where it builds), the PyTorch path it falls back to (gather + SDPA), and two fixes of
    that path.

    seqs: [(start_pos, 1, block_ids)] of the running decodes. Variants (outputs checked against the
    engine's): 'fold GQA' puts the query heads sharing a KV head on the query axis (SDPA reads each
    K/V row once instead of once per query head); '+ 4 length buckets' also sorts the sequences by
    context and pads each quarter only to its own longest context, not the batch's."""
    from refengine.attention.metadata import build_attention_metadata
    from refengine.attention.reference import paged_attention

    _, nb, bs, kvh, d = kv_cache.shape
    flat, scale, g = kv_cache.view(2, nb * bs, kvh, d), d**-0.5, num_heads // kvh
    q = torch.randn(len(seqs), num_heads * d)

    def folded(qq, group):
        meta = build_attention_metadata(group, block_size)
        b, L = meta.decode_slots.shape
        k = flat[0].index_select(0, meta.decode_slots.view(-1)).view(b, L, kvh, d).transpose(1, 2)
        v = flat[1].index_select(0, meta.decode_slots.view(-1)).view(b, L, kvh, d).transpose(1, 2)
        return F.scaled_dot_product_attention(
            qq.view(b, kvh, g, d), k, v, attn_mask=meta.decode_mask, scale=scale
        ).reshape(b, -1)

    def bucketed(parts=4):
        order = sorted(range(len(seqs)), key=lambda i: seqs[i][0])
        out = torch.empty_like(q)
        for c in range(parts):
            idx = order[c * len(order) // parts : (c + 1) * len(order) // parts]
            out[idx] = folded(q[idx], [seqs[i] for i in idx])
        return out

    meta = build_attention_metadata(seqs, block_size)
    base = paged_attention(q, kv_cache, meta, num_heads, scale)
    out = {}
    from refengine.kernels import cpu_paged_decode

    if cpu_paged_decode.applies(q, kv_cache):

        def kernel():
            return cpu_paged_decode.paged_decode_cpu(
                q, kv_cache, meta.decode_block_tables, meta.decode_seq_lens, num_heads, scale
            )

        assert torch.allclose(kernel(), base, atol=1e-4), "C++ kernel"
        out[KERNEL_VARIANT] = best_time(kernel, n)
    out[FALLBACK_VARIANT] = best_time(lambda: paged_attention(q, kv_cache, meta, num_heads, scale), n)
    for name, f in (("fold GQA", lambda: folded(q, seqs)), ("fold GQA + 4 length buckets", bucketed)):
        assert torch.allclose(f(), base, atol=1e-4), name
        out[name] = best_time(f, n)
    return out


def best_time(f, n: int = 10) -> float:
    f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_peak(shapes: list[tuple[int, int, int]], seconds: float = 1.0) -> dict:
    """Best sustained float32 F.linear rate per shape ([M,K] x [N,K]^T); the peak is the max."""
    out = {}
    for m, n, k in shapes:
        x, w = torch.randn(m, k), torch.randn(n, k)
        F.linear(x, w)
        best, t_end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            for _ in range(3):
                F.linear(x, w)
            best = max(best, 3 * 2 * m * n * k / (time.perf_counter() - t))
        out[f"{m}x{k} @ {n}x{k}"] = best
    return out  # FLOP/s per shape


# ----- profiling --------------------------------------------------------------------------------

CATEGORIES = {
    # mkldnn's _linear_pointwise: the packed float32 linears (refengine/model/layers/cpu_gemm.py).
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise"),
    "attention (SDPA)": (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
        "aten::_softmax",
    ),
    "KV gather / scatter": ("aten::index_select", "aten::index_copy_", "aten::index", "aten::embedding"),
}


UNSEEN = "not seen by the profiler (wall - ops: C++ decode kernel via ctypes, Python, dispatch)"


def profile_breakdown(prof, wall_s: float, steps: int = 1) -> dict:
    """Self CPU time per category, seconds per step, from torch.profiler over `steps` steps that took
    `wall_s` in all. What the profiler does not see is the wall time minus its ops: the C++ decode
    kernel (called through ctypes, no torch op), Python and dispatch."""
    cats = {c: 0.0 for c in CATEGORIES} | {"other torch ops": 0.0}
    top = []
    for ev in prof.key_averages():
        s = ev.self_cpu_time_total / 1e6
        top.append((ev.key, s, ev.count))
        for c, names in CATEGORIES.items():
            if ev.key in names:
                cats[c] += s
                break
        else:
            cats["other torch ops"] += s
    cats = {k: v / steps for k, v in cats.items()}
    cats[UNSEEN] = max(0.0, wall_s / steps - sum(cats.values()))
    top.sort(key=lambda x: -x[1])
    return {
        "wall_s": wall_s / steps,
        "categories_s": cats,
        "top_ops": [{"op": k, "self_s": s / steps, "calls": c / steps} for k, s, c in top[:8]],
    }


# ----- output ------------------------------------------------------------------------------------


def source_digest(package: str = "refengine") -> str:
    """sha256 of the package's .py files: which engine code a figure was measured on."""
    import hashlib
    import importlib
    from pathlib import Path

    root = Path(importlib.import_module(package).__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + f.read_bytes())
    return h.hexdigest()[:16]


def cpu_model() -> dict:
    """The CPU as /proc/cpuinfo names it, and the instruction-set flags a figure depends on (AVX-512,
    AMX): the host moves between days, so every figure records which one it was measured on."""
    info: dict = {"model": platform.processor() or platform.machine(), "flags": []}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    info["model"] = value.strip()
                elif key.strip() in ("flags", "Features") and not info["flags"]:
                    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "fma")
                    info["flags"] = [x for x in value.split() if x in wanted]
    except OSError:
        pass
    return info


def machine() -> dict:
    return {
        "date": datetime.date.today().isoformat(),
        "refengine_sha256_16": source_digest(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else False,
    }


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title)
        for h in header:
            t.add_column(h)
        for r in rows:
            t.add_row(*[str(c) for c in r])
        Console(width=160).print(t)
    except ImportError:  # plain fallback
        print(title)
        for r in [header] + rows:
            print("  " + " | ".join(str(c) for c in r))


def write_json(path: str | None, data: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)
        print(f"raw figures written to {path}")


def verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    met = value >= target if higher_is_better else value <= target
    return "met" if met else "MISSED"
