"""`llmdiag calibrate`: measure this machine's operator costs into a profile for `llmdiag plan`."""

from __future__ import annotations

from pathlib import Path

import typer

from llmbench.cli_common import make_console, user_errors
from llmbench.options.parse import parse_list

console = make_console()


def calibrate(
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the profile (JSON; `llmdiag plan --profile`)."),
    name: str = typer.Option("this machine", "--name", help="The profile's name, as predictions quote it."),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="A small grid (seconds, not a minute): enough to check the "
        "command; predictions beyond it are extrapolated and say so.",
    ),
    max_tokens: int = typer.Option(
        2048,
        "--max-tokens",
        help="Largest step (tokens) the matmul grid measures; set it to the engine's max_num_batched_tokens.",
    ),
    no_comm: bool = typer.Option(
        False,
        "--no-comm",
        help="Skip the collective benchmark (then TP/PP communication is priced as free, and the profile says so).",
    ),
    comm_nprocs: int = typer.Option(
        2,
        "--comm-nprocs",
        help="Local processes the collective benchmark runs (gloo on a CPU; NCCL on a GPU, one GPU each).",
    ),
    ranks: str = typer.Option(
        "2,4",
        "--ranks",
        help="Rank counts (TP x PP) that will share this host's cores in the plans you predict, comma "
        "separated: refengine gives each of R ranks cores // R threads, and a prefill's matmul on fewer "
        "threads is slower, so the operators are measured again at each such thread count.",
    ),
    device: str = typer.Option(
        "auto",
        "--device",
        help="Where to measure: auto (a CUDA GPU when one is visible, else this CPU), cpu or cuda. refengine's "
        "dtype there is the one measured (float32 on a CPU, bfloat16 on a GPU); on a GPU the collectives are "
        "NCCL's, measured when --comm-nprocs GPUs are visible.",
    ),
    serve: bool = typer.Option(
        False,
        "--serve",
        help="Also sweep the bundled server (tiny-test, concurrency 1 and 8, prompts of 128 and 512 "
        "tokens, ~1 min) and fit the profile to it: what serving adds to every step (HTTP streaming) "
        "and to every request, by its prompt's length (docs/planning.md).",
    ),
) -> None:
    """Measure this machine with refengine's own layers (matmuls on a grid of shapes, paged attention,
    norms/RoPE/activation, the engine's per-step overhead) and the comm probe's all-reduce, and write a
    versioned profile that `llmdiag plan --profile FILE` predicts TTFT, TPOT and throughput from."""
    from analyzers.diagnosis_error import DiagnosisError
    from analyzers.plan.calibrate import CalibrationGrid, resolve_measure_device
    from analyzers.plan.calibrate import calibrate as measure

    with user_errors():
        if max_tokens < 2 or comm_nprocs < 2:
            raise DiagnosisError("--max-tokens and --comm-nprocs must be >= 2")
        rank_counts = tuple(parse_list(ranks, int, "--ranks"))
        if any(c < 1 for c in rank_counts):
            raise DiagnosisError(f"--ranks counts must be >= 1, got {ranks!r}")
        if quick:
            grid = CalibrationGrid(
                ms=(1, 16, 256),
                sizes=(64, 512),
                decode_batches=(1, 8),
                decode_contexts=(64, 256),
                prefill_tokens=(32, 128),
                table_tokens=(32, 128),
                table_head_dims=(16, 64),
                elementwise_tokens=(1, 64),
                overhead_batches=(1, 4),
                repeats=2,
            )
        else:
            ms = tuple(sorted({m for m in CalibrationGrid().ms if m < max_tokens} | {max_tokens}))
            grid = CalibrationGrid(ms=ms)
        if out.parent and not out.parent.exists():
            raise DiagnosisError(f"{out.parent} does not exist")
        where = resolve_measure_device(device)
        rows, why_not = None, "--no-comm"
        gpus = _gpus() if where.is_gpu else 0
        if not no_comm and where.is_gpu and gpus < comm_nprocs:
            why_not = f"{gpus} GPU visible, NCCL needs {comm_nprocs}"
            console.print(f"collectives not measured: {why_not} (TP/PP communication is priced as free)")
        elif not no_comm:
            rows = _comm_rows(comm_nprocs, quick, "nccl" if where.is_gpu else "gloo")
        profile = measure(
            grid,
            rows,
            name=name,
            progress=lambda what: console.print(f"[dim]measuring {what}[/]"),
            rank_counts=rank_counts,
            device=where,
            no_comm_reason=why_not,
        )
        profile.save(out)
        if serve:
            profile = _fit_to_served(out, quick)
            profile.save(out)
    ov = profile.step_overhead
    # Without the comm probe the collective is a placeholder (free): say so, never print it as a figure.
    comm = (
        f"all-reduce not measured ({why_not}: free in predictions, wrong under TP/PP > 1)"
        if rows is None
        else f"all-reduce {profile.collective.bus_bw_bytes_s / 1e9:.2f} GB/s bus bandwidth"
    )
    shared = ", ".join(str(t.threads) for t in profile.fewer_threads)
    measured_on = (
        where.description
        if where.is_gpu
        else f"{profile.threads} threads"
        + (f"; again at {shared} for ranks sharing the {profile.cores} cores" if shared else "")
    )
    console.print(
        f"wrote {out}: step overhead {ov.fixed_s * 1e3:.2f} ms + {ov.per_unit_s * 1e6:.0f} us/request, "
        f"best matmul {profile.roofline.peak_flops / 1e9:.0f} GFLOP/s ({measured_on}), {comm}",
        highlight=False,
    )


def _fit_to_served(profile_path: Path, quick: bool):
    """A short sweep of the bundled server, the profile fitted to all its levels (the same path as
    `llmbench sweep` then `llmdiag plan --predict-sweep RUN --fit all`)."""
    import subprocess
    import sys
    import tempfile

    from analyzers.diagnosis_error import DiagnosisError
    from llmbench.diag.plan_predict import predict_run

    console.print("[dim]sweeping the bundled server (tiny-test) to fit what serving adds[/]")
    with tempfile.TemporaryDirectory(prefix="llmdiag-calibrate-") as tmp:
        run = Path(tmp) / "served"
        warmup, duration = ("1", "3") if quick else ("2", "6")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmbench.cli",
                "sweep",
                "--model",
                "tiny-test",
                "--concurrency",
                "1,8",
                # Two prompt lengths: the time a request spends before the engine sees it grows with
                # its prompt (tokenizing it), a term one length cannot separate from the fixed one.
                "--input-len",
                "128,512",
                "--output-len",
                "32",
                "--warmup",
                warmup,
                "--duration",
                duration,
                "--out",
                str(run),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise DiagnosisError(f"the served sweep failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        # tiny-test's operators are too small to say what operators cost: only the overheads are fitted.
        # Steady steps: a calibrated profile prices the step, a fit to the user's own run adds its wander.
        result = predict_run(run, str(profile_path), "all", None, fit_scale=False, step_jitter=False)
    ov = result.profile.step_overhead
    console.print(
        f"[dim]fitted to the served sweep: step overhead {ov.fixed_s * 1e3:.2f} ms + "
        f"{ov.per_unit_s * 1e6:.0f} us/request, operators x {result.profile.compute_scale:.2f}[/]"
    )
    return result.profile


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _comm_rows(nprocs: int, quick: bool, backend: str) -> list[dict]:
    from dataclasses import asdict

    from probes.comm import CommSpec, run_local

    console.print(f"[dim]measuring all-reduce (the comm probe, {backend})[/]")
    sizes = (1 << 10, 1 << 20) if quick else (1 << 10, 1 << 16, 1 << 20, 1 << 23)
    spec = CommSpec(backend=backend, ops=("all_reduce",), sizes=sizes, iters=5 if quick else 20, warmup=2)
    return [asdict(r) for r in run_local(spec, nprocs)]
