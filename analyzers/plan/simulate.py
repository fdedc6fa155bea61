"""A level served on a virtual clock by refengine's own Scheduler, step times from the step model.

The loop is the engine's (refengine/server/engine_loop.py, refengine/engine.py): take in what has
arrived, `Scheduler.schedule()`, run the step (here: advance the clock by the step model's time),
`Scheduler.update_from_output()` with one sampled token per sampling request. Everything the
scheduler decides (admission order, chunked prefill, preemption by recompute, prefix-cache hits,
max_num_seqs, max_num_batched_tokens, the watermark) is the real code deciding it, on the real KV
cache manager; only the model is replaced by a clock. Under pipeline parallelism the batch queue is
reproduced (refengine/distributed/batch_queue.py): up to PP batches in flight, a new one issued when
stage 0 is free, each landing a full pass through the stages after it was issued.

Load, as the sweep sends it: closed loop (N users, each sends its next request when its last one
ends) or open loop (requests at given arrival times), kept running after the window until the
window's requests have finished. Requests are a function of their index
(prompt tokens, output tokens); the face builds it from loadgen's workloads, so a prediction and a
measurement come from the same specification.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.request_overhead import RequestOverhead
from analyzers.plan.step_model import StepModel, StepShape
from analyzers.plan.window import FIXED, LevelWindow, WindowSizing
from refengine.config import CacheConfig, SchedulerConfig
from refengine.core.outputs import ModelRunnerOutput, SchedulerOutput
from refengine.core.scheduler import Scheduler
from refengine.request import Request
from refengine.sampling_params import SamplingParams

SAMPLED_TOKEN = 7  # any id: requests ignore EOS and stop at max_tokens, as the sweep asks

LengthsFn = Callable[[int], tuple[list[int], int]]  # request index -> (prompt token ids, output tokens)


@dataclass(frozen=True)
class LoadSpec:
    """Closed loop (concurrency) or open loop (arrivals, seconds from the level's start)."""

    warmup_s: float
    duration_s: float
    concurrency: int | None = None
    arrivals: Iterator[float] | None = None
    drain_limit_s: float = 600.0  # the window's requests may run this long past its end
    seed: int = 0  # the request overheads' jitter
    sizing: WindowSizing = FIXED  # a sized warm-up or window, as the sweep's (analyzers/plan/window.py)
    # After the window the clients keep sending until the window's requests have finished, so the last
    # of them are served under the same load as the first (the sweep's drain, docs/metrics.md); False:
    # nothing is sent after the window, and its last requests finish on an emptying engine.
    keep_load: bool = True

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.arrivals is None):
            raise DiagnosisError("a load is either a concurrency or a list of arrival times")
        if self.concurrency is not None and self.concurrency < 1:
            raise DiagnosisError("concurrency must be >= 1")
        if self.warmup_s < 0 or self.duration_s <= 0:
            raise DiagnosisError("warm-up must be >= 0 and the window > 0")


@dataclass
class SimRecord:
    """One request as the client would have seen it (virtual seconds)."""

    t_sent: float
    prompt_tokens: int
    output_tokens: int
    t_first_token: float | None = None
    t_done: float | None = None
    preemptions: int = 0
    t_first_scheduled: float | None = None  # the engine's: when its prefill began (the server's prefill phase)

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_sent

    @property
    def prefill_phase_s(self) -> float | None:
        """First scheduled to first token: the phase vLLM's `request_prefill_time_seconds` times."""
        if self.t_first_token is None or self.t_first_scheduled is None:
            return None
        return self.t_first_token - self.t_first_scheduled

    @property
    def tpot_s(self) -> float | None:
        if self.t_done is None or self.t_first_token is None or self.output_tokens < 2:
            return None
        return (self.t_done - self.t_first_token) / (self.output_tokens - 1)


@dataclass
class SimResult:
    records: list[SimRecord]
    window: tuple[float, float]
    tokens_in_window: int  # output tokens whose step ended inside the window
    steps: int
    preemptions: int
    notes: set[str]
    mean_batch: float = 0.0  # requests per step over the window's steps

    @property
    def in_window(self) -> list[SimRecord]:
        lo, hi = self.window
        return [r for r in self.records if lo <= r.t_sent < hi]

    @property
    def output_tok_s(self) -> float:
        return self.tokens_in_window / (self.window[1] - self.window[0])


class Simulator:
    def __init__(
        self,
        model: StepModel,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        request_overhead: RequestOverhead = RequestOverhead(),
        batches_in_flight: int = 1,
    ):
        self.model, self.scheduler_config, self.cache_config = model, scheduler_config, cache_config
        self.request_overhead = request_overhead
        # The pipeline's depth, as the engine resolves its schedule (analyzers/plan/engine_config.py):
        # PP under the batch queue, 1 when the stages take turns (a step is every stage in turn).
        if not 1 <= batches_in_flight <= model.pp:
            raise DiagnosisError(f"batches_in_flight must be in [1, PP={model.pp}], got {batches_in_flight}")
        self.batches_in_flight = batches_in_flight

    def run(
        self, load: LoadSpec, lengths: LengthsFn, max_steps: int = 2_000_000, trace: list[SchedulerOutput] | None = None
    ) -> SimResult:
        """`trace`, if given, receives every non-empty SchedulerOutput in order (for tests and debugging)."""
        return EngineRun(self, load, lengths, trace).go(max_steps)


class EngineRun:
    """One level's simulation: its clock, its scheduler, its clients. A fleet (analyzers/plan/fleet.py)
    drives several, routing one arrival stream over them with `send` and `advance`."""

    def __init__(self, sim: Simulator, load: LoadSpec, lengths: LengthsFn, trace: list[SchedulerOutput] | None):
        self.sim, self.load, self.lengths, self.trace = sim, load, lengths, trace
        self.now = 0.0
        depth = sim.batches_in_flight
        self.scheduler = Scheduler(
            sim.scheduler_config, sim.cache_config, clock=lambda: self.now, max_batches_in_flight=depth
        )
        self.depth = depth
        self.index = itertools.count()
        self.records: dict[str, SimRecord] = {}
        self.rng = random.Random(f"plan/{load.seed}")
        # Steps wander (analyzers/plan/step_jitter.py); a stream of their own, so that turning the
        # jitter on leaves the request overheads' draws where they were.
        self.jitter = sim.model.profile.step_jitter
        self.step_rng = random.Random(f"plan/{load.seed}/steps")
        self.pace, self.pace_until = 1.0, 0.0  # the host's speed now, and until when it holds
        self.requests: dict[str, Request] = {}  # sent, not yet at the server
        self.arrivals: list[tuple[float, int, str]] = []  # heap of (time at the server, index, id)
        self.next_open = next(load.arrivals, None) if load.arrivals is not None else None
        self.window = LevelWindow(load.warmup_s, load.duration_s, load.sizing)
        self.cold_users_at_start = load.concurrency or 0
        self.cold_users = self.cold_users_at_start  # closed loop: users that have not finished a request yet
        self.window_sent = 0
        self.tokens_in_window = 0
        self.steps = 0
        self.window_steps = 0
        self.window_open = 0  # window requests not finished yet
        self.window_batch = 0
        self.notes: set[str] = set()
        self.pending: collections.deque[tuple[float, SchedulerOutput]] = collections.deque()  # (lands at, batch)
        self.stage_free = 0.0
        self.done_times: list[float] = []  # when each request finished, in order (a router counts them)

    # ---- clients ----------------------------------------------------------------------------
    def send(self, t: float, index: int | None = None) -> None:
        """A request sent at `t`: the next of this run's own, or the stream's request `index` (a fleet's)."""
        i = next(self.index) if index is None else index
        prompt, n_out = self.lengths(i)
        if not 0 < len(prompt) < self.scheduler.max_model_len:
            raise DiagnosisError(
                f"request {i} has a prompt of {len(prompt)} tokens; the engine refuses any not "
                f"shorter than max_model_len {self.scheduler.max_model_len} (raise it, or shorten "
                "the workload's prompts)"
            )
        rid = str(i)
        self.records[rid] = SimRecord(t_sent=t, prompt_tokens=len(prompt), output_tokens=n_out)
        in_window = self.window.contains(t)
        self.window_open += in_window
        self.window_sent += in_window
        # HTTP and tokenization before the engine sees it, slower while the server streams to more
        # requests and for a longer prompt (analyzers/plan/request_overhead.py; 0 unless measured or
        # fitted); uniform in [0, 2 x mean]: clients do not reach the server in the same microsecond.
        mean = self.sim.request_overhead.mean_s(self.scheduler.num_running, len(prompt))
        arrive = t + mean * 2 * self.rng.random()
        request = Request(
            rid, prompt, SamplingParams(max_tokens=n_out, ignore_eos=True), eos_token_id=None, arrival_time=arrive
        )
        heapq.heappush(self.arrivals, (arrive, i, rid))
        self.requests[rid] = request

    def sending(self) -> bool:
        """Clients send during warm-up and window, and after it while the window's requests run (LoadSpec.keep_load)."""
        return self.now < self.window.hi or (self.load.keep_load and not self.window_done())

    def take_in(self) -> None:
        """Open loop: the arrivals due by now; then everything that has reached the server."""
        while self.next_open is not None and self.next_open <= self.now and self.sending():
            self.send(self.next_open)
            self.next_open = next(self.load.arrivals, None) if self.load.arrivals is not None else None
        while self.arrivals and self.arrivals[0][0] <= self.now:
            _, _, rid = heapq.heappop(self.arrivals)
            self.scheduler.add_request(self.requests.pop(rid))

    def next_event(self) -> float | None:
        times = [
            t
            for t in (self.arrivals[0][0] if self.arrivals else None, self.next_open if self.sending() else None)
            if t is not None
        ]
        return min(times) if times else None

    # ---- the engine loop --------------------------------------------------------------------
    def go(self, max_steps: int) -> SimResult:
        if self.load.concurrency is not None:
            # Every user sends at once, as the load generator's do (at its plan's start). Users that ask
            # for the same lengths then stay in phase, each wave's prefills in one step, until the
            # request overhead's jitter (fitted to a run) sends some into another step: the measured
            # runs show both (bench/RESULTS.md: tiny's TP2 c16, TTFT P50 3.25 s = P99).
            for _ in range(self.load.concurrency):
                self.send(0.0)
        self.advance(self.window.latest_end + self.load.drain_limit_s, max_steps)
        return self.result(max_steps)

    def advance(self, until: float, max_steps: int, more_coming: bool = False) -> None:
        """The engine's loop until its clock reaches `until` (a step begun before it may land after it),
        it has nothing to do, or sending has stopped and the window's requests are done. `more_coming`:
        a router will send more, so having nothing to do now is waiting, not the end."""
        while self.steps < max_steps and self.now < until:
            if not self.sending() and self.window_done():
                break  # checked first, so that a fleet's later calls add no step to a finished level
            self.take_in()
            if not self.scheduler.has_unfinished_requests():
                nxt = self.next_event()
                if nxt is None or nxt > until:  # idle until after `until`: a router may send before then
                    break
                self.now = max(self.now, nxt)
                continue
            if not self.step():
                nxt = self.next_event()  # nothing fits and nothing in flight: wait for the world
                if nxt is None and not more_coming:
                    raise DiagnosisError("the simulated engine cannot schedule anything (KV cache too small?)")
                if nxt is None or nxt > until:
                    break
                self.now = max(self.now, nxt)

    def result(self, max_steps: int) -> SimResult:
        if self.steps >= max_steps:
            self.notes.add(f"stopped after {max_steps} simulated steps")
        n = self.window_steps or 1  # per-step means over the window's steps (0 without any)
        return SimResult(
            list(self.records.values()),
            (self.window.lo, self.window.hi),
            self.tokens_in_window,
            self.steps,
            self.scheduler.num_preemptions_total,
            self.notes | self.window.notes(),
            self.window_batch / n,
        )

    def window_done(self) -> bool:
        return self.window_open == 0

    def step(self) -> bool:
        """One engine step (sync), or one batch-queue step under PP. False when nothing was scheduled or landed."""
        submitted = False
        if len(self.pending) < self.depth:
            sched = self.scheduler.schedule()
            if not sched.is_empty:
                if self.trace is not None:
                    self.trace.append(sched)
                cost = self.sim.model.step_cost(_shape(sched))
                self.notes |= cost.notes
                served = self._served_time()
                total = served(cost.total_s)
                if self.depth == 1:
                    self.now += total
                    self.land(sched)
                    return True
                issue = max(self.now, self.stage_free) + cost.overhead_s
                self.stage_free = issue + served(cost.stage_s)
                self.pending.append((issue + total - cost.overhead_s, sched))
                self.now = issue
                submitted = True
        if self.pending and (not submitted or len(self.pending) == self.depth):
            lands, sched = self.pending.popleft()
            self.now = max(self.now, lands)
            self.land(sched)
            return True
        return submitted

    def _served_time(self) -> Callable[[float], float]:
        """The next step's model time -> its served time (analyzers/plan/step_jitter.py): times the
        pace of the stretch it falls in, plus its own excess, never below half the model's; the
        model's time itself without a measured jitter."""
        if self.jitter is None:
            return lambda t: t
        if self.now >= self.pace_until:
            self.pace = self.jitter.draw_pace(self.step_rng.random())
            self.pace_until = self.now + self.jitter.pace_period_s
        pace, excess = self.pace, self.jitter.draw_excess(self.step_rng.random())
        return lambda t: max(t * pace + excess, t / 2)

    def land(self, sched: SchedulerOutput) -> None:
        self.steps += 1
        sampled = {r.req_id: SAMPLED_TOKEN for r in sched.requests if r.sample}
        step_in_window = self.window.contains(self.now)
        if step_in_window:
            self.window_steps += 1
            self.window_batch += len(sched.requests)
        for request, tokens in self.scheduler.update_from_output(sched, ModelRunnerOutput(sampled)):
            rec = self.records[request.request_id]
            if step_in_window:
                self.tokens_in_window += len(tokens)
            if rec.t_first_token is None:
                rec.t_first_token = self.now
                rec.t_first_scheduled = request.timestamps.first_scheduled
            if request.is_finished():
                rec.t_done = self.now
                rec.output_tokens = request.num_output_tokens  # max_model_len may stop it short
                self.window_open -= self.window.contains(rec.t_sent)
                rec.preemptions = request.num_preemptions
                self.done_times.append(self.now)
                if int(request.request_id) < self.cold_users_at_start:
                    self.cold_users -= 1  # a user's first request: indices 0..concurrency-1, sent at the start
                    if self.cold_users == 0:
                        self.window.every_user_warm(self.now)
                if self.load.concurrency is not None and self.sending():
                    self.send(self.now)  # the user's next request, at once (closed loop)
        self.window.holds(self.now, self.window_sent)


def _shape(sched: SchedulerOutput) -> StepShape:
    return StepShape(
        tuple((r.num_tokens, r.end_pos) for r in sched.requests), sum(1 for r in sched.requests if r.sample)
    )


def random_prompt(n: int, seed: int, i: int, vocab: int = 32_000) -> list[int]:
    """Token ids that share no block with another request's (random text prompts share none either):
    the first two ids spell out the request's index, so its first block, and so every chained block
    hash, differs from every other request's (for fewer than (vocab - 16)^2 requests). Cheap: a level
    simulates thousands of them."""
    span = vocab - 16
    head = [16 + i % span, 16 + (i // span) % span]
    start = (seed * 1_000_003 + i * 7919) % span
    return (head + [16 + (start + j * 104729) % span for j in range(max(0, n - 2))])[:n]
