"""Before the first level: find out what the target takes and how it counts, and record it.

The model (from /v1/models when --model is not given), the preflight (loadgen.preflight: one
real request with the sweep's exact body, adapted until the server takes it) and the calibration
of text prompts against the server's own token count (loadgen.calibration). What was decided is
written into run.json (target.omit_fields, target.adaptations, sweep.workload's prompt format and
text sizer), so a resumed sweep sends exactly the same requests without asking again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console

from llmbench.sweep.spec import spec_of
from loadgen.calibration import calibrate
from loadgen.preflight import Adaptation, preflight
from loadgen.prompt_text import TextSizer, estimated_sizer, sizer_for_tokenizer
from loadgen.specs import TargetSpec
from loadgen.target_probe import TargetClient
from loadgen.workloads import RequestSpec, WorkloadOptions, make_workload
from rundir import RunDir, RunInfo, WorkloadSpec

SHORT_PROMPT_TOKENS = 32  # the first preflight's prompt, before the server has counted


def target_spec(info: RunInfo, url: str, api_key: str | None) -> TargetSpec:
    t = info.target
    return TargetSpec(
        url=url,
        model=t.model or "",
        api_key=api_key,
        endpoint=t.endpoint,
        send_ignore_eos=t.ignore_eos,
        omit_fields=list(t.omit_fields),
        replica_header=t.replica_header,
        replica_urls=list(t.urls),
        lb_policy=t.lb_policy or "round-robin",
    )


def _provisional_sizer(workload: WorkloadSpec) -> TextSizer:
    exact = sizer_for_tokenizer(workload.tokenizer) if workload.tokenizer else None
    return exact or estimated_sizer()


@dataclass
class Settled:
    """What the preflight and the calibration decided for one target."""

    target: TargetSpec
    prompt_format: str
    sizer: TextSizer | None
    adaptations: list[Adaptation]


def _first_requests(
    workload: WorkloadSpec, sizer: TextSizer | None, input_len: int, output_len: int, seed: int
) -> tuple[RequestSpec, RequestSpec | None]:
    """The workload's first request, and the same as text (for a server that refuses token ids)."""
    options = WorkloadOptions.of(
        workload, input_len=input_len, output_len=output_len, seed=seed, text_sizer=sizer.to_dict() if sizer else None
    )
    spec = make_workload(options).spec(0)
    text_spec = (
        make_workload(replace(options, prompt_format="text")).spec(0) if options.prompt_format == "ids" else None
    )
    return spec, text_spec


def settle_requests(
    client: TargetClient,
    workload: WorkloadSpec,
    input_len: int,
    output_len: int,
    seed: int,
    strict: bool,
    console: Console,
) -> Settled:
    """Preflight (the workload's body with a short prompt: which fields and prompt format the server
    takes), calibrate text prompts against the server's count, then the exact first request."""
    text_kind = workload.kind != "sharegpt"
    sizer = _provisional_sizer(workload) if text_kind else None
    short = min(input_len, SHORT_PROMPT_TOKENS) if text_kind else input_len
    with console.status(f"preflight: the sweep's request body to {client.target.url} ..."):
        result = preflight(
            client, *_first_requests(workload, sizer, short, output_len, seed), workload.prompt_format, strict
        )
    adaptations: list[Adaptation] = list(result.adaptations)
    workload = replace(workload, prompt_format=result.prompt_format)
    if sizer is not None and result.prompt_format == "text":
        with console.status("calibrating text prompts against the server's token count ..."):
            sizer, notes = calibrate(client, sizer, input_len)
        adaptations += notes
    with console.status("preflight: the first request exactly as the sweep will send it ..."):
        exact = preflight(
            client, *_first_requests(workload, sizer, input_len, output_len, seed), result.prompt_format, strict
        )
    adaptations += [a for a in exact.adaptations if a not in adaptations]
    result = exact
    if sizer is not None and result.prompt_format == "text":
        check = sizer.calibration.check
        console.print(
            f"prompts: text, {sizer.tokens_per_word:.3g} tokens per word + {sizer.overhead_tokens:g} "
            f"({sizer.source})"
            + (f"; {check.requested} requested -> {check.counted} counted by the server" if check else ""),
            highlight=False,
        )
    for a in adaptations:
        console.print(f"[yellow]adapted:[/] {a.line()}", highlight=False)
    return Settled(result.target, result.prompt_format, sizer, adaptations)


def prepare_target(
    run: RunDir, info: RunInfo, url: str, api_key: str | None, strict: bool, console: Console
) -> TargetSpec:
    """Settle the model, the request fields and the prompt sizing; returns the TargetSpec to sweep with."""
    tspec = target_spec(info, url, api_key)
    if info.target.preflight_done:
        return tspec  # resumed: the same requests as the first attempt
    first = spec_of(info).levels()[0]
    # The setup's requests wait as long as the sweep's own would (--request-timeout), no longer.
    with TargetClient(tspec, timeout_s=info.sweep.request_timeout_s) as client:
        if not tspec.model:
            tspec.model = client.resolve_model()
            info.target.model = tspec.model
            console.print(f"model: [bold]{tspec.model}[/] (the one {url}/v1/models lists)")
        settled = settle_requests(
            client, info.sweep.workload, first.input_len, first.output_len, first.seed, strict, console
        )
    tspec = settled.target
    settled_by: dict[str, Any] = {"prompt_format": settled.prompt_format}
    if settled.sizer is not None:
        settled_by["text_sizer"] = settled.sizer.to_dict()
    info.sweep.workload = info.sweep.workload.updated(**settled_by)
    info.target = replace(
        info.target,
        omit_fields=list(tspec.omit_fields),
        ignore_eos=tspec.send_ignore_eos,
        adaptations=[a.to_dict() for a in settled.adaptations],
        preflight_done=True,
    )
    if run.exists():
        run.write_info(info)
    else:
        run.create(info)
        console.print(f"run directory: [bold]{run.path}[/]")
    return tspec
