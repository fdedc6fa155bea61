"""The verdict on a memory estimate and the OOM fixes in the seed's order, each priced in numbers.

Seed, section 5.2: weights, KV, activations, comm buffers, fragmentation — then fix in this order:
paged KV, a shorter max-model-len, truncate or queue long requests, lower the concurrency cap,
quantize. "Don't start by cutting concurrency": that trades business for stability. Every fix
here is priced by re-running the memory model with the plan changed, so the numbers are the
model's own, not rules of thumb.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.model.memory import GiB, MemoryEstimate, estimate_memory


@dataclass(frozen=True)
class Fix:
    step: int  # the seed's order, 1..5
    name: str
    change: str  # what to set
    before: str
    after: str
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    fits: bool
    headline: str
    reasons: tuple[str, ...]
    max_concurrency: int  # at tokens_per_request (max_model_len if contiguous)
    safe_concurrency: int  # with the seed's 20% headroom


def verdict(est: MemoryEstimate) -> Verdict:
    plan, reasons = est.plan, []
    if not est.loads:
        over = -est.kv_budget / GiB
        headline = (
            f"does not load: weights + activations + buffers need {est.non_kv / GiB:.1f} GiB of the "
            f"{est.usable / GiB:.1f} GiB usable per GPU ({over:.1f} GiB over)"
        )
        reasons.append(
            "concurrency 1 would fail too: this is a weights/plan problem, not KV — quantize the "
            "weights or split wider (more TP/PP; see `llmdiag plan`)"
        )
    elif not est.holds_one_request:
        headline = (
            f"loads, but the KV cache ({est.kv_tokens:,} tokens) cannot hold one request of "
            f"max_model_len={plan.max_model_len:,} (vLLM refuses to start)"
        )
        reasons.append(f"lower max_model_len to <= {est.kv_tokens:,} or free memory for KV")
    elif not est.fits:
        headline = (
            f"loads, but only {est.max_concurrency()} requests of {_req(est)} fit in KV; {plan.concurrency} asked for"
        )
        reasons.append(
            f"KV needed {est.kv_needed / GiB:.2f} GiB > KV budget {est.kv_budget / GiB:.2f} GiB per GPU"
            " — expect preemptions (vLLM) or OOM (engines that reserve per request)"
        )
    elif not est.fits_with_headroom:
        headline = (
            f"fits, but without the 20% headroom: {plan.concurrency} requested, "
            f"{est.safe_concurrency()} is the safe cap"
        )
    else:
        headline = f"fits: {plan.concurrency} concurrent requests of {_req(est)}, safe up to {est.safe_concurrency()}"
    return Verdict(
        fits=est.fits,
        headline=headline,
        reasons=tuple(reasons),
        max_concurrency=est.max_concurrency(),
        safe_concurrency=est.safe_concurrency(),
    )


def _req(est: MemoryEstimate) -> str:
    tokens = est.plan.max_model_len if est.plan.kv_layout == "contiguous" else est.plan.tokens_per_request
    return f"{tokens:,} tokens"


def _c(est: MemoryEstimate, tokens: int | None = None) -> str:
    return f"{est.max_concurrency(tokens)} concurrent" if est.loads else "does not load"


def suggest_fixes(est: MemoryEstimate) -> list[Fix]:
    shape, plan = est.shape, est.plan
    again = lambda **changes: estimate_memory(shape, plan.with_(**changes))  # noqa: E731
    fixes: list[Fix] = []

    # 1. Paged KV: a request holds the blocks it uses, not max_model_len reserved up front.
    paged = again(kv_layout="paged")
    contiguous = again(kv_layout="contiguous")
    typical = plan.tokens_per_request
    note = (
        ""
        if typical < plan.max_model_len
        else "every request is assumed to reach max_model_len; pass --request-tokens (typical prompt+output) "
        "to see what paging buys for real traffic"
    )
    fixes.append(
        Fix(
            1,
            "paged KV cache",
            "kv_layout=paged (vLLM always pages)",
            f"reserve {plan.max_model_len:,}/request: {_c(contiguous)}",
            f"{typical:,} tokens/request: {_c(paged)}",
            note if plan.kv_layout == "paged" else "the largest single win when requests vary in length",
        )
    )

    # 2. Shorter max_model_len: the worst case each request may grow to, and what vLLM sizes for.
    shorter = max(plan.block_size, plan.max_model_len // 2)
    worst_now = paged.max_concurrency(plan.max_model_len)
    worst_short = again(max_model_len=shorter, request_tokens=None, kv_layout="paged").max_concurrency(shorter)
    fixes.append(
        Fix(
            2,
            "shorter max_model_len",
            f"max_model_len={shorter:,}",
            f"{plan.max_model_len:,}: {worst_now} requests at full length" if est.loads else "does not load",
            f"{shorter:,}: {worst_short} requests at full length" if est.loads else "does not load",
            "requests longer than the new limit get a 400 instead of squeezing everyone's KV",
        )
    )

    # 3. Truncate or queue long requests: let one max-length request run, keep the rest short.
    cap = typical if typical < plan.max_model_len else max(plan.block_size, plan.max_model_len // 4)
    long_blocks, cap_blocks = est.blocks_per_request(plan.max_model_len), est.blocks_per_request(cap)
    mixed = 1 + max(0, paged.num_blocks - long_blocks) // cap_blocks if paged.holds_one_request else 0
    fixes.append(
        Fix(
            3,
            "truncate or queue long requests",
            f"truncate prompts over {cap:,} tokens, or queue them so one long request runs at a time",
            f"all may reach {plan.max_model_len:,}: {worst_now} concurrent",
            f"1 long + requests <= {cap:,}: {mixed} concurrent",
            "a gateway policy; keeps max_model_len for the few who need it",
        )
    )

    # 4. Lower the concurrency cap: stability bought with throughput (the seed: not first).
    safe = est.safe_concurrency()
    fixes.append(
        Fix(
            4,
            "lower the concurrency cap",
            f"max_num_seqs={safe} (the 20%-headroom figure)",
            f"max_num_seqs={plan.max_num_seqs} lets that many run ({plan.concurrency} expected)",
            f"{safe} running at most; KV stays <= 80% full",
            "treats the symptom: the excess queues (TTFT grows) instead of being preempted",
        )
    )

    # 5. Quantize: FP8 KV halves bytes per token; FP8 weights free memory for more KV.
    if plan.kv_bytes > 1:
        q_kv = again(kv_dtype="fp8")
        fixes.append(
            Fix(
                5,
                "quantize the KV cache",
                "kv_cache_dtype=fp8",
                f"{plan.kv_bytes:g} B/elem: {_c(est)}",
                f"1 B/elem: {_c(q_kv)}",
                "validate quality (KV quantization behaves differently per task)",
            )
        )
    if plan.weight_bytes > 1:
        q_w = again(weight_dtype="fp8")
        freed = (est.weights - q_w.weights) / GiB
        fixes.append(
            Fix(
                5,
                "quantize the weights",
                "quantization=fp8",
                f"weights {est.weights / GiB:.1f} GiB/GPU: {_c(est)}",
                f"{q_w.weights / GiB:.1f} GiB/GPU (+{freed:.1f} GiB KV): {_c(q_w)}",
                "keep lm_head and attention-critical parts in 16-bit; run a quality check",
            )
        )
    return fixes
