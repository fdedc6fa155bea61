"""Small synthetic run directories, written through RunDir, for hand-computed expectations."""

from __future__ import annotations

from pathlib import Path

from rundir import LevelMeta, RequestRecord, RunDir, RunInfo

T0 = 1_800_000_000.0  # the synthetic run's start (epoch seconds)


def rec(
    t_sent: float,
    ttft: float | None,
    e2e: float | None,
    n_out: int,
    status: str = "ok",
    level: str = "c1",
    concurrency: int = 1,
    in_window: bool = True,
    n_in: int = 10,
    kind: str | None = None,
    error: str | None = None,
    itl=(),
    target_out: int | None = None,
) -> RequestRecord:
    """One request sent at T0 + t_sent, with TTFT/E2E in seconds (None: never happened)."""
    t = T0 + t_sent
    ok = status == "ok"
    return RequestRecord(
        level_id=level,
        concurrency=concurrency,
        request_rate=None,
        target_input_len=n_in,
        target_output_len=n_out if target_out is None else target_out,
        t_scheduled=t,
        t_sent=t,
        t_first_token=None if ttft is None else t + ttft,
        t_done=None if e2e is None else t + e2e,
        status=status,
        in_window=in_window,
        prompt_tokens=n_in if ok else None,
        completion_tokens=n_out if ok else None,
        client_prompt_tokens=n_in,
        client_completion_tokens=n_out if ok else None,
        itl_s=list(itl),
        error=error,
        error_kind=kind,
    ).derive()


def make_run(
    path: Path,
    records: list[RequestRecord],
    windows: dict[str, tuple[float, float]] | None = None,
    model: str = "tiny",
    status: str = "complete",
    slos: dict | None = None,
    duration_s: float = 10.0,
) -> RunDir:
    """A run directory holding `records`; `windows`: level -> (start, end) seconds after T0."""
    run = RunDir(path)
    levels = list(dict.fromkeys(r.level_id for r in records))
    concurrency = sorted({r.concurrency for r in records if r.concurrency is not None})
    info = RunInfo.from_dict(
        dict(
            run_id=path.name,
            command=["llmbench", "sweep"],
            target={"url": None, "model": model, "kind": "embedded", "endpoint": "completions", "engine_args": []},
            sweep={
                "concurrency": concurrency,
                "request_rate": [],
                "input_lens": [10],
                "output_lens": [11],
                "warmup_s": 0.0,
                "duration_s": duration_s,
                "workers": 1,
                "workload": {"kind": "random"},
            },
            slos=slos or {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05},
            host={"hostname": "test"},
            tool_version="test",
            status=status,
            started=T0,
            finished=T0 + 100,
        )
    )
    info.levels_done = levels if status == "complete" else levels[:-1]
    for level, (start, end) in (windows or {}).items():
        info.level_meta[level] = LevelMeta(window_s=end - start, window_start=T0 + start, window_end=T0 + end)
    run.create(info)
    run.append_records(records)
    return run
