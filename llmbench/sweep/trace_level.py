"""A trace as the sweep's level (`llmbench sweep --workload trace`): one open-loop level at the
trace's own times, played once by default (docs/workloads.md, "Replay"); `llmbench capacity`
reads the trace's mean rate here too."""

from __future__ import annotations


def sweep_trace(a):
    """--workload trace: the loadgen.trace.Trace that --dataset and --trace-limit name (ValueError
    with the user's words when there is none)."""
    from loadgen.trace import load_trace

    if a.dataset is None:
        raise ValueError("--workload trace needs --dataset FILE (a Mooncake .jsonl or Azure .csv trace)")
    return load_trace(a.dataset, a.trace_limit)


def trace_level(spec, a) -> None:
    """The sweep's one level of a trace (`spec`, a SweepSpec, changed in place from `a`, the
    SweepArgs): open loop at the trace's own times, its mean rate naming the level and its mean
    lengths the level's lengths; its warm-up, window and whether it cycles (_timeline)."""
    if spec.concurrency or len(spec.request_rate) > 1:
        raise ValueError(
            "--workload trace sends at the trace's times: give no --concurrency or --request-rate "
            "(scale time with --trace-speed)"
        )
    if not a.trace_speed > 0:
        raise ValueError("--trace-speed must be > 0")
    trace = sweep_trace(a)
    spec.workload = spec.workload.updated(
        trace_speed=a.trace_speed,
        trace_limit=a.trace_limit,
        block_size=a.block_size,
        trace_loop=_timeline(spec, a, trace.span_s / a.trace_speed),
    )
    spec.concurrency, spec.request_rate = [], [float(f"{trace.mean_rate(a.trace_speed):.3g}")]
    spec.input_lens = [max(1, round(sum(r.input_len for r in trace.rows) / len(trace.rows)))]
    spec.output_lens = [max(1, round(sum(r.output_len for r in trace.rows) / len(trace.rows)))]


def _timeline(spec, a, pass_s: float) -> str | None:
    """A trace level's warm-up and window, and why it cycles (None: it does not). By default the
    trace plays once: no warm-up unless --warmup says, the window the rest of the trace's span. It
    cycles when asked (--trace-loop, a capacity search) or when --warmup + --duration are longer
    than one pass; shorter, the level plays the trace's first part (docs/workloads.md, "Replay").
    Its own times are the experiment, so nothing is sized."""
    spec.steady_warmup, spec.sample_target, spec.max_duration_s = False, None, None
    if a.trace_loop is not None or a.duration is not None:
        spec.warmup_s = spec.warmup_s if a.warmup is not None or a.trace_loop else 0.0
        if a.trace_loop is not None:
            return a.trace_loop
        return "--duration" if spec.warmup_s + spec.duration_s > pass_s * (1 + 1e-9) else None
    spec.warmup_s = 0.0 if a.warmup is None else spec.warmup_s
    if spec.warmup_s >= pass_s:
        raise ValueError(
            f"--warmup {spec.warmup_s:g} s is the whole trace ({pass_s:.3g} s at --trace-speed "
            f"{a.trace_speed:g}): the trace plays once, so give a shorter --warmup, or --trace-loop"
        )
    spec.duration_s = pass_s - spec.warmup_s
    return None
