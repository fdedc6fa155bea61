"""OOM and KV-cache wordings of the engines other than PyTorch's allocator, each with the cause it
implies and the fixes, taken from real logs (tests/analyzers/oom/oom_logs/real/README.md names them):

- SGLang start-up: "Not enough memory. Please try to increase --mem-fraction-static" (newer:
  "Not enough memory to allocate KV cache"): after the weights and the reserved share
  (1 - mem_fraction_static of the card) nothing is left for the KV pool;
- SGLang at run time: "alloc_req_slots runs out of memory. Please set a smaller number for
  `--max-running-requests`": more requests admitted than request slots;
- TGI warm-up: "Not enough memory to handle N prefill tokens. You need to decrease
  `--max-batch-prefill-tokens`": the warm-up prefill batch does not fit beside the weights;
- cuBLAS: "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`": the card was full
  when cuBLAS created its handle and workspace (KV preallocation or another process took it);
- NCCL: "NCCL WARN Cuda failure 'out of memory'" (often surfacing as "unhandled cuda error"):
  communicator buffers could not be allocated;
- vLLM start-up: "Free memory on device (F/T GiB) on startup is less than desired GPU memory
  utilization (U, X GiB)": something else holds the GPU;
- vLLM sampler warm-up: "CUDA out of memory occurred when warming up sampler with N dummy requests".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from analyzers.oom.contracts import GiB, OomFinding

_SGL_POOL = re.compile(r"Not enough memory(?:\. Please try to increase --mem-fraction-static| to allocate KV cache)")
_SGL_SLOTS = re.compile(
    r"alloc_req_slots runs out of memory\.?\s*Please set a smaller number for\s*`?--max-running-"
    r"requests`?\.?(?:\s*self\.req_to_token_pool\.available_size\(\)=(\d+),\s*num_reqs=(\d+))?"
)
_TGI_WARMUP = re.compile(
    r"Not enough memory to handle (\d+) prefill tokens\.\s*You need to decrease\s*"
    r"`?--max-batch-prefill-tokens`?"
)
_CUBLAS = re.compile(r"CUBLAS_STATUS_ALLOC_FAILED(?: when calling `?cublasCreate\(handle\)`?)?")
# NCCL's own CUDA-check wording; PyTorch's "NCCL error ... unhandled cuda error" repeats it under
# "Last error:" lines after the first error line, without the "NCCL WARN" prefix (a vLLM worker's log).
_NCCL_OOM = re.compile(r"(?:NCCL WARN )?(?:Cuda failure|Failed to CUDA calloc)[^\n]*?'?out of memory'?")
_NCCL_UNHANDLED = re.compile(r"unhandled cuda error")
_VLLM_FREE = re.compile(
    r"Free memory on device(?: (cuda:\d+))? \(([\d.]+)/([\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_VLLM_SAMPLER = re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests")
_VLLM_NO_BLOCKS = re.compile(r"No available memory for the cache blocks")
_VLLM_PREEMPT = re.compile(
    r"preempted by \S+ mode because there is not enough KV cache space.*?"
    r"(?:total_num_cumulative_preemption=(\d+))?$",
    re.M,
)


# What a message carries: (OomFinding.numbers, the fields its wording, explanation and fixes are formatted with).
Reading = tuple[dict[str, float], dict[str, object]]


def _nothing(m: re.Match[str], text: str) -> Reading:
    return {}, {}


def _sgl_slots(m: re.Match[str], text: str) -> Reading:
    # Newer SGLang prints the pool's size and the requests it was asked for; older versions only the advice.
    return ({"available_slots": float(m.group(1)), "requests": float(m.group(2))} if m.group(1) else {}), {}


def _tgi_warmup(m: re.Match[str], text: str) -> Reading:
    n = int(m.group(1))
    return {"prefill_tokens": float(n)}, {"n": n}


def _nccl(m: re.Match[str], text: str) -> Reading:
    # The "unhandled cuda error" usually comes lines later, so it is looked for in the whole text.
    return {}, {"unhandled": ", unhandled cuda error" if _NCCL_UNHANDLED.search(text) else ""}


def _vllm_free(m: re.Match[str], text: str) -> Reading:
    free, total, util, want = (float(m.group(i)) for i in (2, 3, 4, 5))
    numbers = {
        "free": free * GiB,
        "total": total * GiB,
        "gpu_memory_utilization": util,
        "wanted": want * GiB,
        "held_by_others": (total - free) * GiB,
    }
    return numbers, {
        "free": free,
        "total": total,
        "util": util,
        "want": want,
        "held": total - free,
        "device": f" ({m.group(1)})" if m.group(1) else "",
        "fits": max(free / total - 0.02, 0.0),
    }


def _vllm_sampler(m: re.Match[str], text: str) -> Reading:
    n = int(m.group(1))
    return {"dummy_requests": float(n)}, {"n": n}


def _vllm_preempt(m: re.Match[str], text: str) -> Reading:
    return ({"cumulative_preemptions": float(m.group(1))} if m.group(1) else {}), {}


@dataclass(frozen=True)
class _Message:
    kind: str
    pattern: re.Pattern[str]
    wording: str  # str.format templates over read()'s fields, like explanation and fixes
    explanation: str
    fixes: tuple[str, ...]
    read: Callable[[re.Match[str], str], Reading] = _nothing
    excerpt_chars: int | None = None  # the long messages are cut, the short ones quoted whole


# In the order the findings are reported.
_MESSAGES = (
    _Message(
        "sglang_kv_pool",
        _SGL_POOL,
        "SGLang (Not enough memory ... --mem-fraction-static)",
        "SGLang sizes its KV pool from what is left after the weights and the reserved share "
        "(1 - mem_fraction_static of the card, for activations and CUDA graphs): nothing is left",
        (
            "raise --mem-fraction-static (e.g. 0.85 -> 0.9) if the weights fit: a start-up OOM needs *more*, "
            "a runtime OOM less",
            "shorter --context-length, or quantize / shard the weights (--tp)",
            "price the plan with `llmdiag oom --model ...`",
        ),
    ),
    _Message(
        "sglang_req_slots",
        _SGL_SLOTS,
        "SGLang (alloc_req_slots runs out of memory)",
        "more requests were admitted than the request-to-token pool has slots: a concurrency "
        "limit, not GPU memory as such",
        (
            "set --max-running-requests at or below the slots SGLang reports at start-up",
            "lower the offered concurrency",
        ),
        read=_sgl_slots,
        excerpt_chars=300,
    ),
    _Message(
        "tgi_warmup_prefill",
        _TGI_WARMUP,
        "TGI warm-up (Not enough memory to handle N prefill tokens)",
        "TGI's warm-up runs one prefill batch of {n:,} tokens after loading the weights; its "
        "activations (and the KV blocks it reserves) do not fit in what is left",
        (
            "--max-batch-prefill-tokens below {n:,} (and --max-input-length / --max-total-tokens with it)",
            "quantize the weights (--quantize) or shard wider (--num-shard)",
        ),
        read=_tgi_warmup,
    ),
    _Message(
        "cublas_alloc_failed",
        _CUBLAS,
        "cuBLAS (CUBLAS_STATUS_ALLOC_FAILED)",
        "cuBLAS could not allocate its handle and workspace: the card was already full — the KV "
        "cache preallocation took it (gpu_memory_utilization too high) or another process holds it",
        (
            "lower gpu_memory_utilization to leave room outside the KV cache (non-torch memory)",
            "check nothing else holds the GPU (nvidia-smi)",
        ),
    ),
    _Message(
        "nccl_oom",
        _NCCL_OOM,
        "NCCL (Cuda failure 'out of memory'{unhandled})",
        "NCCL could not allocate its communicator buffers: the GPU was full when the collective "
        "ran (the 'unhandled cuda error' that follows is this OOM)",
        (
            "leave room outside the KV cache (lower gpu_memory_utilization)",
            "smaller NCCL buffers (NCCL_BUFFSIZE) or fewer channels (NCCL_MAX_NCHANNELS)",
        ),
        read=_nccl,
        excerpt_chars=300,
    ),
    _Message(
        "vllm_startup_free_memory",
        _VLLM_FREE,
        "vLLM start-up (Free memory on device ... less than desired)",
        "{held:.2f} GiB of the {total:.2f} GiB card{device} was in use before vLLM started; it "
        "wants {util:g} x {total:.2f} = {want:.2f} GiB but only {free:.2f} GiB is free",
        (
            "stop what holds the GPU (a previous server, a notebook: nvidia-smi)",
            "or --gpu-memory-utilization <= {fits:.2f} (what is free)",
        ),
        read=_vllm_free,
    ),
    _Message(
        "vllm_sampler_warmup",
        _VLLM_SAMPLER,
        "vLLM (CUDA out of memory when warming up sampler)",
        "the sampler's warm-up with {n} requests (max_num_seqs) needs logits of {n} x vocab "
        "floats beside the KV cache, and they do not fit",
        ("--max-num-seqs below {n}", "lower gpu_memory_utilization (leaves room for the sampler)"),
        read=_vllm_sampler,
    ),
    _Message(
        "vllm_no_kv_blocks",
        _VLLM_NO_BLOCKS,
        "vLLM (No available memory for the cache blocks)",
        "weights + profiled activations (+ graphs, NCCL) already use all of "
        "gpu_memory_utilization x GPU memory: nothing is left for KV — a weights/plan problem",
        (
            "raise gpu_memory_utilization (if nothing else shares the GPU)",
            "split wider (tensor_parallel_size) or quantize the weights (fp8/int4); see `llmdiag plan`",
            "lower max_num_batched_tokens / max_num_seqs: the profiling pass's activations shrink",
        ),
    ),
    _Message(
        "vllm_preemption",
        _VLLM_PREEMPT,
        "vLLM (preempted: not enough KV cache space)",
        "not an OOM: the KV cache filled and vLLM evicted running requests to recompute later "
        "(latency spikes, wasted prefill)",
        (
            "lower max_num_seqs to the 20%-headroom concurrency (`llmdiag oom --model ...`)",
            "more KV: fp8 KV cache, higher gpu_memory_utilization, or more TP",
        ),
        read=_vllm_preempt,
        excerpt_chars=300,
    ),
)


def parse_engine_messages(text: str) -> list[OomFinding]:
    """One finding per engine message found in `text` (its first occurrence), in _MESSAGES' order."""
    out: list[OomFinding] = []
    for msg in _MESSAGES:
        m = msg.pattern.search(text)
        if not m:
            continue
        numbers, fields = msg.read(m, text)
        f = OomFinding(msg.kind, msg.wording.format(**fields), m.group(0)[: msg.excerpt_chars], numbers)
        f.explanation.append(msg.explanation.format(**fields))
        f.fixes += [fix.format(**fields) for fix in msg.fixes]
        out.append(f)
    return out
