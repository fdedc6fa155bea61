"""The options that can fail on user input, checked into the parts of the sweep's plan: the workload
(run.json's sweep.workload), a trace's or sessions' own options, the SLO, and the levels' timeline
(fixed or sized warm-up and window). Each raises before anything is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from llmbench.options.parse import parse_duration
from llmbench.sweep.setup.args import SweepArgs
from rundir import SloSpec, WorkloadSpec
from rundir.run_info import (
    DEFAULT_DURATION_S,
    DEFAULT_MAX_DURATION_S,
    DEFAULT_TPOT_P95_S,
    DEFAULT_TTFT_P99_S,
    DEFAULT_WARMUP_S,
)


def workload_options(
    kind: str,
    dataset: Path | None,
    spread: float,
    target: str | None,
    model: str | None,
    tokenizer: Path | None,
    long_len: int = 4096,
    long_fraction: float = 0.1,
    prompt_format: str = "text",
) -> WorkloadSpec:
    """run.json's workload (loadgen builds the requests from it); token-id prompts must stay inside
    the target's vocabulary."""
    from loadgen.workloads import KINDS, PROMPT_FORMATS

    kind = kind.replace("-", "_")
    if kind not in KINDS:
        raise ValueError(f"--workload must be one of {', '.join(k.replace('_', '-') for k in KINDS)}, got {kind!r}")
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"--prompt-format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    if dataset is not None and not Path(dataset).is_file():
        raise ValueError(f"--dataset {dataset}: no such file")
    if kind == "sharegpt" and dataset is None:
        raise ValueError("--workload sharegpt needs --dataset FILE (a ShareGPT .json or .jsonl file)")
    opts: dict[str, Any] = {
        "kind": kind,
        "prompt_format": prompt_format,
        "input_len_spread": spread,
        "dataset_path": str(dataset) if dataset else None,
        "long_len": long_len,
        "long_fraction": long_fraction,
    }
    tok_path = tokenizer
    if target is None:  # the embedded engine: its own tokenizer tells the vocabulary
        from refengine.model.tiny import resolve_model

        tok_path = resolve_model(model or "tiny")
    if tok_path is not None:
        from tokenizers import Tokenizer

        file = Path(tok_path) / "tokenizer.json" if Path(tok_path).is_dir() else Path(tok_path)
        if not file.is_file():
            raise ValueError(f"no tokenizer.json at {tok_path}")
        opts["vocab_size"] = Tokenizer.from_file(str(file)).get_vocab_size()
        opts["tokenizer"] = str(file)
    elif prompt_format == "ids":
        raise ValueError(
            "--prompt-format ids needs --tokenizer (the target's tokenizer.json or model directory): "
            "token ids must come from the target's own vocabulary"
        )
    return WorkloadSpec().updated(**opts)


def trace_or_sessions(spec, a: SweepArgs) -> None:
    """A trace is one open-loop level at the trace's own times (llmbench.sweep.trace_level); sessions
    take their turn count."""
    from llmbench.sweep.trace_level import trace_level

    kind = spec.workload.kind
    if kind == "sessions":
        spec.workload = spec.workload.updated(turns=a.turns)
    if kind != "trace":
        if a.trace_loop is not None:
            raise ValueError("--trace-loop cycles a trace: it needs --workload trace")
        return
    trace_level(spec, a)


def slo_spec(a: SweepArgs) -> SloSpec:
    """The user's SLO; with none of --slo-ttft/--slo-tpot/--slo-e2e given, the defaults, marked as such."""
    default = a.slo_ttft is None and a.slo_tpot is None and a.slo_e2e is None
    try:
        return SloSpec(
            ttft_p99_s=DEFAULT_TTFT_P99_S if a.slo_ttft is None else a.slo_ttft,
            tpot_p95_s=DEFAULT_TPOT_P95_S if a.slo_tpot is None else a.slo_tpot,
            e2e_p99_s=a.slo_e2e,
            default=default,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo-ttft/--slo-tpot/--slo-e2e") from None


def timeline(a: SweepArgs) -> dict:
    """SweepInfo's durations and sizing: --warmup and --duration given fix the warm-up and the
    window; left out, each is sized (at least the default, at most --max-duration), the window for
    the P99 the tables report (MIN_SAMPLES_FOR_P99, the rule that flags a P99 from fewer)."""
    from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99

    steady, sized = a.warmup is None, a.duration is None
    if not (steady or sized) and a.max_duration is not None:
        raise ValueError(
            "--max-duration bounds a sized warm-up or window: with both --warmup and --duration given, nothing is sized"
        )
    max_s = parse_duration(a.max_duration, "--max-duration") if a.max_duration is not None else DEFAULT_MAX_DURATION_S
    return {
        "warmup_s": DEFAULT_WARMUP_S if a.warmup is None else parse_duration(a.warmup, "--warmup"),
        "duration_s": DEFAULT_DURATION_S if a.duration is None else parse_duration(a.duration, "--duration"),
        "steady_warmup": steady,
        "sample_target": MIN_SAMPLES_FOR_P99 if sized else None,
        "max_duration_s": max_s if steady or sized else None,
    }
