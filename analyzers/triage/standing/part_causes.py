"""The causes a standing level's dominant part can have: the KV cache at its ceiling (in every part),
then by part — time in the queue (the admission limit, the token budget), in prefill (long
prompts), in decode (batches grown past the baseline's, stalls in the stream)."""

from __future__ import annotations

from analyzers.triage.levels import LevelLoad
from analyzers.triage.phases import LevelPhases
from analyzers.triage.standing.limits import cap_words
from analyzers.triage.standing.split import NOT_SPLIT, duration

KV_FULL = 0.95
PINNED = 0.75  # running mean >= this x max_num_seqs: the batch is pinned at its cap
# (scrapes between two steps catch one fewer now and then)
MIN_WAITING = 0.5  # requests waiting on average (KV, token budget)
SMALL_CAP = 4  # caps this small are judged by the batch reaching them, not by the mean
MIN_QUEUED_SHARE = 0.3  # requests waited in at least this share of the level's scrapes (admission)
LONG_PROMPT_TOKENS = 1024
BATCH_GROWTH = 1.5
STALL_SHARE = 0.02

Verdict = tuple[str, str]  # (check id, the sentence with the numbers)


def kv_capacity(ph: LevelPhases, queue_part: bool, limits: dict) -> Verdict | None:
    """The KV cache at its ceiling, read from its gauges (kv_from_gauges) or, where the gauges never
    caught it full, from the cache the server published: it cannot hold the requests the level kept
    in the server (kv_from_count)."""
    return kv_from_gauges(ph.server, queue_part, limits.get("max_num_seqs")) or kv_from_count(ph, queue_part, limits)


def kv_from_gauges(s: dict, queue_part: bool, cap: int | None) -> Verdict | None:
    """The KV cache at its ceiling and something to show for it: preemptions, retracted requests, or
    requests waiting while the queue dominates. "At its ceiling" is >= KV_FULL, or full *for the next
    request*: while requests waited, the free part was smaller than one running request's share
    (usage / running; unique prompts share nothing), however far from 100% it reads — 10 of 16
    blocks used by one request that the next one needs 10 of (the same rule as `llmdiag oom --ramp`,
    docs/diagnosis.md). A batch pinned at a known max_num_seqs is the admission limit's instead."""
    waiting = s.get("waiting_mean") or 0.0
    kv_max, pre, retr = s.get("kv_usage_max"), s.get("preemptions") or 0.0, s.get("retracted_max") or 0.0
    if kv_max is None:
        return None
    kv_w, per_request = s.get("kv_usage_when_waiting"), s.get("kv_per_running_when_waiting")
    below_cap = cap is None or (s.get("running_max_when_waiting") or 0.0) < cap
    next_one_waits = kv_w is not None and per_request is not None and below_cap and 1.0 - kv_w < per_request
    if kv_max < KV_FULL and not next_one_waits:
        return None
    if not (pre > 0 or retr > 0 or (queue_part and waiting >= MIN_WAITING)):
        return None
    what = f"{pre:.0f} preemptions" if pre else f"{retr:.0f} retracted" if retr else f"{waiting:.1f} waiting"
    if kv_max >= KV_FULL or kv_w is None:  # (below KV_FULL the next request waits: kv_w is known)
        return "p99.sched.kv-capacity", f"KV cache {kv_max:.0%} full with {what}"
    return "p99.sched.kv-capacity", (
        f"KV cache full for the next request: {kv_w:.0%} used while requests waited, "
        f"the free {1 - kv_w:.0%} less than one running request's {per_request:.0%}, "
        f"with {what}"
    )


def kv_from_count(ph: LevelPhases, queue_part: bool, limits: dict) -> Verdict | None:
    """The cache the server published (num_gpu_blocks x block_size, rundir.kv_cache) holds fewer of
    this level's requests (prompt + output, none shared) than it kept in the server, running and
    waiting, while the queue dominates. The gauges can miss this: a request that fills the cache
    lives a few steps, and a once-a-second scrape taken between two requests reads it empty.
    Not named when the admission cap binds first (max_num_seqs <= what fits), or when more ran at
    once than the count allows (shared prefixes: the count is not what the engine needs)."""
    cache, s = limits.get("kv_cache"), ph.server
    waiting, running = s.get("waiting_mean") or 0.0, s.get("running_mean") or 0.0
    if cache is None or not queue_part or waiting < MIN_WAITING:
        return None
    tokens = ph.in_tokens_mean + ph.out_tokens_mean
    replicas = limits.get("replicas") or 1
    fit = cache.requests_that_fit(tokens) * replicas
    cap, ran = limits.get("max_num_seqs"), s.get("running_max")
    if fit < 1 or running + waiting <= fit or (cap is not None and cap <= fit) or (ran is not None and ran > fit):
        return None
    each = f"{cache.usable_blocks} usable blocks of {cache.block_size} tokens" + (
        f" on each of {replicas} replicas" if replicas > 1 else ""
    )
    return "p99.sched.kv-capacity", (
        f"KV cache full for the next request: its {each} hold {fit} request{'s' if fit > 1 else ''} "
        f"of {tokens:,.0f} tokens ({cache.blocks_per_request(tokens)} blocks each) at once, "
        f"with {waiting:.1f} waiting"
    )


def _held_at(held: float, ceiling: float, held_nonempty: float | None = None) -> bool:
    """The batch held at its ceiling while requests waited. A scrape reads the batch as the last step
    left it: the requests that step finished are gone and their successors not yet scheduled (vLLM's
    gauges are set after each step the same way). With a small cap that is a large share of it — a cap
    of 1 reads 0 through every next request's prefill, most of the time when outputs are short — so
    a small cap is allowed one short (or half) on average. Or a small cap is held where every batch a
    step left non-empty was at it (`held_nonempty`, within half a request): a queue beside an empty
    batch lasts until the next step, and a cap of 2 whose two requests were admitted together and
    finish in the same step read 0 at 8 of a level's 15 scrapes and 2 at the other 7, 18 waiting at
    each (bench/RESULTS.md, seed 12's draw 2); a batch of 1 under a cap of 3 beside a queue is not held
    by the cap. A larger cap must be held at PINNED of it on average."""
    if ceiling <= SMALL_CAP:
        at_cap = held_nonempty is not None and held_nonempty >= ceiling - 0.5
        return held >= min(0.5 * ceiling, ceiling - 1) or at_cap
    return held >= PINNED * ceiling


def _queue(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in the queue: the admission limit (batch pinned at its cap) or the token budget."""
    s = ph.server
    waiting = s.get("waiting_mean") or 0.0
    cap = limits.get("max_num_seqs")
    held, held_max = s.get("running_when_waiting"), s.get("running_max_when_waiting")
    queued = s.get("waiting_share") or 0.0
    ceiling = cap if cap is not None else s.get("running_max")
    # Pinned: while requests waited the batch reached its cap, and held most of it on average.
    pinned = (
        held is not None
        and held_max is not None
        and ceiling
        and queued >= MIN_QUEUED_SHARE
        and held_max >= ceiling
        and _held_at(held, ceiling, s.get("running_when_waiting_nonempty"))
        and lv.load
        and ceiling < lv.load
    )
    if pinned and ceiling is not None and held is not None:  # pinned says so; mypy needs it spelled out
        limit = cap_words(limits) if cap is not None else f"{s['running_max']:.0f} (its ceiling)"
        nonempty = s.get("running_when_waiting_nonempty")
        between = (
            f", {nonempty:.1f} in the batches a step left non-empty"
            if ceiling <= SMALL_CAP and nonempty is not None and nonempty > held + 0.05
            else ""
        )
        return "p99.sched.admission", (
            f"admission limit, running pinned at {limit} (mean {held:.1f} while "
            f"requests waited{between}, {queued:.0%} of the level) with {waiting:.1f} waiting"
        )
    mbt = limits.get("max_num_batched_tokens")
    if waiting >= MIN_WAITING and mbt and ph.in_tokens_mean >= 0.5 * mbt:
        return "p99.sched.token-budget", (
            f"{waiting:.1f} waiting with prompts of {ph.in_tokens_mean:.0f} tokens against a {mbt}-token budget"
        )
    return None


def _prefill(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in prefill: long prompts, absolutely or against the baseline's."""
    long_prompts = ph.in_tokens_mean >= LONG_PROMPT_TOKENS or (
        base is not None and base.in_tokens_mean > 0 and ph.in_tokens_mean >= 4 * base.in_tokens_mean
    )
    if long_prompts:
        return "p99.sched.prefill-time", f"long prefills, prompts of {ph.in_tokens_mean:.0f} tokens"
    return None


def _decode(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in decode: batches grown past the baseline's, or stalls in the token stream."""
    running = ph.server.get("running_mean")
    base_running = base.server.get("running_mean") if base is not None else None
    if base is not None and running and base_running and running >= BATCH_GROWTH * base_running:
        return "p99.sched.batch-size", (
            f"decode batches of {running:.1f} vs {base_running:.1f} "
            f"at the baseline, TPOT {duration(ph.tpot_mean_s)} vs {duration(base.tpot_mean_s)}"
        )
    if ph.stall_share is not None and ph.stall_share >= STALL_SHARE:
        return "p99.sched.decode-stalls", (
            f"{ph.stall_share:.1%} of token gaps are stalls (>= 10x the median {duration(ph.itl_median_s)})"
        )
    return None


# The causes a dominant part can have, tested after KV capacity and the path.
BY_PART = {"queue": _queue, NOT_SPLIT: _queue, "prefill": _prefill, "decode": _decode}
