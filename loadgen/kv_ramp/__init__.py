"""The seed's ramp (section 5.2): concurrency 1, then up step by step until errors, preemptions or
a saturated KV cache; the running count where it saturates is the server's real KV capacity.

Load: a small asyncio + httpx closed loop, not loadgen's locust levels. The ramp has to add users
one level at a time *without draining* (a drained level never fills the cache), scrape `/metrics`
every 100 ms on the same clock, and stop at the first saturated level; locust levels are separate
processes with warm-up and measured windows, built for latency statistics, and take seconds to
start. Requests have a known length: the caller's `make_body(i)` builds them with the sweep's own
request building (text prompts sized by the server's count, unique per request so prefix caching
cannot share blocks, the fields the preflight found refused left out), non-streaming.
A level where every request failed stops the ramp with the server's own message: that is a
refused request, not a capacity of zero.

Estimate: usable blocks // ceil((prompt + max_tokens) / block_size), from the server's own
`vllm:cache_config_info` (num_gpu_blocks, block_size; vLLM v1 reserves one of them: rundir.kv_cache). Requests whose prompt already occupies all
the blocks the finished request needs (prompt and output within one block edge) never grow by a
block mid-decode, so admission alone decides how many run and nothing is preempted; otherwise the
server admits on prompt blocks, then preempts as requests grow, and the capacity is read from the
oscillation.

Metric names: the ramp does not parse /metrics itself. Its caller passes `parse_gauges` (text ->
ServerGauges), built on the probes' one table of each engine's metric names (probes.prom), so
the ramp, the probes and the target facts read the same names the same way.

spec.py (RampSpec, RampError), gauges.py (ServerGauges, the /metrics reads), observation.py (a level
observed, its saturation), result.py (RampResult: observed against the estimate), users.py (the
closed-loop users), loop.py (run_ramp).
"""
