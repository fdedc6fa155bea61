"""OOM and KV-cache wordings of the engines other than PyTorch's allocator, each with the cause it
implies and the fixes, taken from real logs (tests/diagnosis/oom_logs/real/README.md names them):

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

from analyzers.oom.contracts import GiB, OomFinding

_SGL_POOL = re.compile(r"Not enough memory(?:\. Please try to increase --mem-fraction-static| to allocate KV cache)")
_SGL_SLOTS = re.compile(r"alloc_req_slots runs out of memory\.?\s*Please set a smaller number for\s*`?--max-running-"
                        r"requests`?\.?(?:\s*self\.req_to_token_pool\.available_size\(\)=(\d+),\s*num_reqs=(\d+))?")
_TGI_WARMUP = re.compile(r"Not enough memory to handle (\d+) prefill tokens\.\s*You need to decrease\s*"
                         r"`?--max-batch-prefill-tokens`?")
_CUBLAS = re.compile(r"CUBLAS_STATUS_ALLOC_FAILED(?: when calling `?cublasCreate\(handle\)`?)?")
_NCCL_OOM = re.compile(r"NCCL WARN (?:Cuda failure|Failed to CUDA calloc)[^\n]*?'?out of memory'?")
_NCCL_UNHANDLED = re.compile(r"unhandled cuda error")
_VLLM_FREE = re.compile(r"Free memory on device(?: (cuda:\d+))? \(([\d.]+)/([\d.]+) GiB\) on startup is less than "
                        r"desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)")
_VLLM_SAMPLER = re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests")
_VLLM_NO_BLOCKS = re.compile(r"No available memory for the cache blocks")
_VLLM_PREEMPT = re.compile(r"preempted by \S+ mode because there is not enough KV cache space.*?"
                           r"(?:total_num_cumulative_preemption=(\d+))?$", re.M)


def parse_engine_messages(text: str) -> list[OomFinding]:
    out: list[OomFinding] = []
    m = _SGL_POOL.search(text)
    if m:
        f = OomFinding("sglang_kv_pool", "SGLang (Not enough memory ... --mem-fraction-static)", m.group(0))
        f.explanation.append("SGLang sizes its KV pool from what is left after the weights and the reserved share "
                             "(1 - mem_fraction_static of the card, for activations and CUDA graphs): nothing is left")
        f.fixes += ["raise --mem-fraction-static (e.g. 0.85 -> 0.9) if the weights fit: a start-up OOM needs *more*, "
                    "a runtime OOM less", "shorter --context-length, or quantize / shard the weights (--tp)",
                    "price the plan with `llmdiag oom --model ...`"]
        out.append(f)
    m = _SGL_SLOTS.search(text)
    if m:
        nums = {"available_slots": float(m.group(1)), "requests": float(m.group(2))} if m.group(1) else {}
        f = OomFinding("sglang_req_slots", "SGLang (alloc_req_slots runs out of memory)", m.group(0)[:300], nums)
        f.explanation.append("more requests were admitted than the request-to-token pool has slots: a concurrency "
                             "limit, not GPU memory as such")
        f.fixes += ["set --max-running-requests at or below the slots SGLang reports at start-up",
                    "lower the offered concurrency"]
        out.append(f)
    m = _TGI_WARMUP.search(text)
    if m:
        n = int(m.group(1))
        f = OomFinding("tgi_warmup_prefill", "TGI warm-up (Not enough memory to handle N prefill tokens)", m.group(0),
                       {"prefill_tokens": float(n)})
        f.explanation.append(f"TGI's warm-up runs one prefill batch of {n:,} tokens after loading the weights; its "
                             "activations (and the KV blocks it reserves) do not fit in what is left")
        f.fixes += [f"--max-batch-prefill-tokens below {n:,} (and --max-input-length / --max-total-tokens with it)",
                    "quantize the weights (--quantize) or shard wider (--num-shard)"]
        out.append(f)
    m = _CUBLAS.search(text)
    if m:
        f = OomFinding("cublas_alloc_failed", "cuBLAS (CUBLAS_STATUS_ALLOC_FAILED)", m.group(0))
        f.explanation.append("cuBLAS could not allocate its handle and workspace: the card was already full — the KV "
                             "cache preallocation took it (gpu_memory_utilization too high) or another process holds it")
        f.fixes += ["lower gpu_memory_utilization to leave room outside the KV cache (non-torch memory)",
                    "check nothing else holds the GPU (nvidia-smi)"]
        out.append(f)
    m = _NCCL_OOM.search(text)
    if m:
        f = OomFinding("nccl_oom", "NCCL (Cuda failure 'out of memory'" + (", unhandled cuda error)"
                                                                           if _NCCL_UNHANDLED.search(text) else ")"),
                       m.group(0)[:300])
        f.explanation.append("NCCL could not allocate its communicator buffers: the GPU was full when the collective "
                             "ran (the 'unhandled cuda error' that follows is this OOM)")
        f.fixes += ["leave room outside the KV cache (lower gpu_memory_utilization)",
                    "smaller NCCL buffers (NCCL_BUFFSIZE) or fewer channels (NCCL_MAX_NCHANNELS)"]
        out.append(f)
    m = _VLLM_FREE.search(text)
    if m:
        free, total, util, want = (float(m.group(i)) for i in (2, 3, 4, 5))
        f = OomFinding("vllm_startup_free_memory", "vLLM start-up (Free memory on device ... less than desired)",
                       m.group(0), {"free": free * GiB, "total": total * GiB, "gpu_memory_utilization": util,
                                    "wanted": want * GiB, "held_by_others": (total - free) * GiB})
        f.explanation.append(f"{total - free:.2f} GiB of the {total:.2f} GiB card"
                             + (f" ({m.group(1)})" if m.group(1) else "") + f" was in use before vLLM started; it "
                             f"wants {util:g} x {total:.2f} = {want:.2f} GiB but only {free:.2f} GiB is free")
        f.fixes += ["stop what holds the GPU (a previous server, a notebook: nvidia-smi)",
                    f"or --gpu-memory-utilization <= {max(free / total - 0.02, 0.0):.2f} (what is free)"]
        out.append(f)
    m = _VLLM_SAMPLER.search(text)
    if m:
        n = int(m.group(1))
        f = OomFinding("vllm_sampler_warmup", "vLLM (CUDA out of memory when warming up sampler)", m.group(0),
                       {"dummy_requests": float(n)})
        f.explanation.append(f"the sampler's warm-up with {n} requests (max_num_seqs) needs logits of {n} x vocab "
                             "floats beside the KV cache, and they do not fit")
        f.fixes += [f"--max-num-seqs below {n}", "lower gpu_memory_utilization (leaves room for the sampler)"]
        out.append(f)
    if _VLLM_NO_BLOCKS.search(text):
        f = OomFinding("vllm_no_kv_blocks", "vLLM (No available memory for the cache blocks)",
                       _VLLM_NO_BLOCKS.search(text).group(0))
        f.explanation.append("weights + profiled activations (+ graphs, NCCL) already use all of "
                             "gpu_memory_utilization x GPU memory: nothing is left for KV — a weights/plan problem")
        f.fixes += ["raise gpu_memory_utilization (if nothing else shares the GPU)",
                    "split wider (tensor_parallel_size) or quantize the weights (fp8/int4); see `llmdiag plan`",
                    "lower max_num_batched_tokens / max_num_seqs: the profiling pass's activations shrink"]
        out.append(f)
    m = _VLLM_PREEMPT.search(text)
    if m:
        f = OomFinding("vllm_preemption", "vLLM (preempted: not enough KV cache space)", m.group(0)[:300],
                       {"cumulative_preemptions": float(m.group(1))} if m.group(1) else {})
        f.explanation.append("not an OOM: the KV cache filled and vLLM evicted running requests to recompute later "
                             "(latency spikes, wasted prefill)")
        f.fixes += ["lower max_num_seqs to the 20%-headroom concurrency (`llmdiag oom --model ...`)",
                    "more KV: fp8 KV cache, higher gpu_memory_utilization, or more TP"]
        out.append(f)
    return out
