"""Read PyTorch CUDA OOM messages and vLLM KV-cache errors out of a log, and explain them.

Wordings recognised (the first match of each in the text; a log may hold several):
- PyTorch >= 2.1 (2.1 spelled it "capacty"): "torch.OutOfMemoryError: CUDA out of memory. Tried to
  allocate X. GPU 0 has a total capacity of T of which F is free. [Process N has M memory in use.] Including non-PyTorch
  memory, this process has P memory in use. Of the allocated memory A is allocated by PyTorch, and
  R is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ..."
- PyTorch < 2.1 (and 1.x): "CUDA out of memory. Tried to allocate X (GPU 0; T total capacity;
  A already allocated; F free; R reserved in total by PyTorch)" — 1.x said "cached" for reserved.
- A raw CUDA error outside PyTorch's allocator: "CUDA error: out of memory" (context, NCCL,
  cuBLAS, graph capture).
- vLLM: "The model's max seq len (M) is larger than the maximum number of tokens that can be
  stored in KV cache (N)", the v1 wording "To serve at least one request with the models's max
  seq len (M), (X GiB KV cache is needed, which is larger than the available KV cache memory (Y
  GiB). ... the estimated maximum model length is L", "No available memory for the cache blocks",
  and the preemption warning "... preempted ... because there is not enough KV cache space";
  vLLM's start-up "Free memory on device ... is less than desired GPU memory utilization" and its
  sampler warm-up OOM; SGLang's, TGI's, cuBLAS's and NCCL's wordings (analyzers/oom/engines.py).
Logs are read as people paste them: process and container prefixes, colours, HTML escapes and
terminal wraps are undone first (analyzers/oom/log_text.py). Anything else is not an OOM message
this knows, and says so.
"""

from __future__ import annotations

import re

from analyzers.diagnosis_error import DiagnosisError
from analyzers.oom.contracts import SIZE, GiB, OomFinding, gib, size_bytes
from analyzers.oom.engines import parse_engine_messages
from analyzers.oom.log_text import variants

__all__ = ["EXPANDABLE", "GiB", "OomFinding", "parse_oom_log", "size_bytes"]

_SIZE = SIZE
_gib = gib

_NEW_TORCH = re.compile(
    r"(?:CUDA out of memory|OutOfMemoryError).*?Tried to allocate "
    + _SIZE
    + r"\.\s*GPU (\d+) has a total capac\w* of "
    + _SIZE
    + r" of which "
    + _SIZE
    + r" is free\.(?P<procs>.*?)(?:Including non-PyTorch memory, this process has "
    + _SIZE
    + r" memory in use\.)?\s*Of the allocated memory "
    + _SIZE
    + r" is allocated by PyTorch,\s*"
    r"(?:with "
    + _SIZE
    + r" allocated in private pools \(e\.g\., CUDA Graphs\),\s*)?and "
    + _SIZE
    + r" is reserved by PyTorch but unallocated",
    re.S,
)
_OLD_TORCH = re.compile(
    r"CUDA out of memory\. Tried to allocate "
    + _SIZE
    + r" \(GPU (\d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; "
    + _SIZE
    + r" free; "
    + _SIZE
    + r" (reserved in total by PyTorch|cached)",
    re.S,
)
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_CUDA_ERROR = re.compile(r"CUDA error: out of memory|cudaErrorMemoryAllocation|NCCL WARN.*out of memory")
_VLLM_MAX_LEN = re.compile(
    r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((\d+)\)"
)
_VLLM_V1 = re.compile(
    r"max seq len \((\d+)\),\s*\(?" + _SIZE + r" KV cache is needed, which is larger than the "
    r"available KV cache memory \(" + _SIZE + r"\)(?:.*?estimated maximum model length is (\d+))?",
    re.S,
)

EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def _torch_story(f: OomFinding) -> None:
    n = f.numbers
    want, total, free, alloc, unalloc = (
        n["tried_to_allocate"],
        n["total"],
        n["free"],
        n["allocated"],
        n["reserved_unallocated"],
    )
    f.explanation.append(
        f"asked for {_gib(want)} on GPU {int(n['gpu'])}: {_gib(free)} of {_gib(total)} was free; "
        f"PyTorch tensors hold {_gib(alloc)}, its cache holds {_gib(unalloc)} more, unused"
    )
    if unalloc >= want and unalloc >= 0.05 * total:
        f.explanation.append(
            f"fragmentation: {_gib(unalloc)} reserved-but-unallocated exceeds the "
            f"{_gib(want)} asked for, yet no cached segment was large enough"
        )
        f.fixes.append(
            f"set {EXPANDABLE} (torch >= 2.1; older: max_split_size_mb:512) so segments grow instead of splitting"
        )
    other = n.get("other_processes", 0.0)
    if other >= 0.05 * total:
        f.explanation.append(f"other processes hold {_gib(other)} of this GPU (a second server, a stale worker?)")
        f.fixes.append("give the server the GPU to itself (nvidia-smi shows who holds it)")
    non_torch = n.get("non_pytorch", 0.0)
    if non_torch >= 2 * GiB:
        f.explanation.append(
            f"{_gib(non_torch)} is outside PyTorch's allocator: CUDA context, NCCL buffers, "
            "CUDA graphs, cuBLAS workspaces"
        )
        f.fixes.append("with vLLM: --enforce-eager drops CUDA graphs; fewer NCCL channels (NCCL_MAX_NCHANNELS)")
    if alloc >= 0.8 * total:
        f.explanation.append(
            f"live tensors fill {alloc / total:.0%} of the card: weights + KV + activations really exceed it"
        )
        f.fixes.append(
            "price the plan with `llmdiag oom --model ...` and apply its fixes in order "
            "(paged KV, shorter max_model_len, truncate/queue long requests, lower concurrency, quantize)"
        )
        if want >= GiB:
            f.explanation.append(
                f"a {_gib(want)} request at this point is the size of a KV cache preallocation "
                "or a long prefill's activations/logits"
            )
            f.fixes.append(
                "lower max_num_batched_tokens (smaller prefill activations) or chunk the prefill; "
                "with vLLM, a lower gpu_memory_utilization leaves room outside the KV preallocation"
            )
    if not f.fixes:
        f.fixes.append("no single cause stands out; run `llmdiag oom --model ...` to see the budget")


def _parse_torch(text: str) -> list[OomFinding]:
    out = []
    m = _NEW_TORCH.search(text)
    if m:
        g = m.groups()
        procs = sum(size_bytes(p[1], p[2]) for p in _PROCESS.findall(m.group("procs") or ""))
        in_use = size_bytes(g[8], g[9]) if g[8] else None
        alloc, unalloc = size_bytes(g[10], g[11]), size_bytes(g[14], g[15])
        numbers = dict(
            tried_to_allocate=size_bytes(g[0], g[1]),
            gpu=float(g[2]),
            total=size_bytes(g[3], g[4]),
            free=size_bytes(g[5], g[6]),
            allocated=alloc,
            reserved_unallocated=unalloc,
        )
        if g[12]:
            numbers["cuda_graph_pools"] = size_bytes(g[12], g[13])  # torch >= 2.4: "allocated in private pools"
        if in_use is not None:
            numbers["process_in_use"] = in_use
            numbers["non_pytorch"] = max(0.0, in_use - alloc - unalloc)
            # The "Process N has" lines include this process when it is listed; count the rest.
            numbers["other_processes"] = max(0.0, procs - in_use) if procs else 0.0
        out.append(OomFinding("torch_oom", "PyTorch >= 2.1 (torch.OutOfMemoryError)", m.group(0)[:300], numbers))
    m = _OLD_TORCH.search(text)
    if m:
        g = m.groups()
        alloc, reserved = size_bytes(g[5], g[6]), size_bytes(g[9], g[10])
        total, free = size_bytes(g[3], g[4]), size_bytes(g[7], g[8])
        numbers = dict(
            tried_to_allocate=size_bytes(g[0], g[1]),
            gpu=float(g[2]),
            total=total,
            free=free,
            allocated=alloc,
            reserved_unallocated=max(0.0, reserved - alloc),
            # What is neither free nor PyTorch's: other processes and non-torch memory together.
            non_pytorch=max(0.0, total - free - reserved),
        )
        wording = 'PyTorch 1.x ("cached")' if g[11] == "cached" else "PyTorch < 2.1 (RuntimeError wording)"
        out.append(OomFinding("torch_oom", wording, m.group(0)[:300], numbers))
    for f in out:
        _torch_story(f)
    return out


def _parse_vllm(text: str) -> list[OomFinding]:
    out = []
    m = _VLLM_V1.search(text)
    if m:
        max_len, need, have = int(m.group(1)), size_bytes(m.group(2), m.group(3)), size_bytes(m.group(4), m.group(5))
        est = int(m.group(6)) if m.group(6) else int(max_len * have / need)
        f = OomFinding(
            "vllm_kv_too_small",
            "vLLM v1 (KV cache is needed ... larger than available)",
            m.group(0)[:300],
            dict(max_model_len=max_len, kv_needed=need, kv_available=have, max_len_that_fits=est),
        )
        f.explanation.append(
            f"one request of max_model_len={max_len:,} needs {_gib(need)} of KV; after weights, "
            f"activations and graphs only {_gib(have)} is left, enough for {est:,} tokens"
        )
        _kv_fixes(f, est)
        out.append(f)
    m = _VLLM_MAX_LEN.search(text)
    if m:
        max_len, kv_tokens = int(m.group(1)), int(m.group(2))
        f = OomFinding(
            "vllm_kv_too_small",
            "vLLM v0 (max seq len larger than KV cache)",
            m.group(0)[:300],
            dict(max_model_len=max_len, kv_tokens=kv_tokens, max_len_that_fits=kv_tokens),
        )
        f.explanation.append(
            f"the KV cache holds {kv_tokens:,} tokens in all; one request of max_model_len="
            f"{max_len:,} would need {max_len / kv_tokens:.2f}x that, so vLLM refuses to start"
        )
        _kv_fixes(f, kv_tokens)
        out.append(f)
    return out


def _kv_fixes(f: OomFinding, tokens_that_fit: int) -> None:
    f.fixes += [
        f"max_model_len <= {tokens_that_fit:,} (what the KV cache holds now)",
        "raise gpu_memory_utilization (e.g. 0.90 -> 0.95) if nothing else shares the GPU",
        "kv_cache_dtype=fp8 doubles the tokens; more tensor_parallel_size splits the KV heads",
    ]


def _parse(text: str) -> list[OomFinding]:
    return _parse_torch(text) + _parse_vllm(text) + parse_engine_messages(text)


def parse_oom_log(text: str) -> list[OomFinding]:
    """All the OOM / KV findings in a log; DiagnosisError when there are none.

    The log is cleaned (prefixes, colours, escapes) and read line by line, then with its lines
    joined at words, then joined mid-word (terminal wraps); a kind found in an earlier form is
    not looked for again."""
    findings: list[OomFinding] = []
    for form in variants(text):
        kinds = {(f.kind, f.wording) for f in findings}
        findings += [f for f in _parse(form) if (f.kind, f.wording) not in kinds]
    if not findings:
        for form in variants(text):
            m = _CUDA_ERROR.search(form)
            if m:
                f = OomFinding("cuda_error_oom", "CUDA runtime (CUDA error: out of memory)", m.group(0))
                f.explanation.append(
                    "the allocation failed outside PyTorch's caching allocator (CUDA context "
                    "creation, NCCL communicator init, cuBLAS workspace, CUDA graph capture) — no "
                    "breakdown in the message"
                )
                f.fixes += [
                    "check nothing else holds the GPU (nvidia-smi); lower gpu_memory_utilization to leave "
                    "room for non-torch memory; --enforce-eager to rule out graph capture"
                ]
                findings.append(f)
                break
    if not findings:
        head = " ".join(text.strip().split())[:60] or "(empty)"
        raise DiagnosisError(
            f"not an OOM message I know (PyTorch, vLLM, SGLang, TGI, cuBLAS or NCCL out-of-memory or "
            f"KV-cache error): {head!r}"
        )
    return findings
