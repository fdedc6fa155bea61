"""`llmdiag oom --run RUN`: did memory pressure occur during a run, when, and at which load level.

Evidence, from the run directory: the server probe's KV usage and preemptions (the engine ran out
of KV blocks and evicted running requests), the gpu probe's memory used against total, and the
requests that failed with an out-of-memory or KV-cache error. Each becomes an episode in time,
mapped to the load levels that were running then, so the answer reads "KV full from level c32
on, 41 preemptions" rather than "memory was tight".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from analyzers.probe_series import ProbeSeries, read_probe
from analyzers.triage.tail_windows import Window, merge
from rundir import RunDir
from rundir.table import RequestTable

KV_FULL = 0.95  # KV usage at or above this is "full"
GPU_MEM_FULL = 0.95  # GPU memory used / total at or above this is "full"
OOM_ERROR = re.compile(r"out of memory|\bOOM\b|KV cache|no available memory|cache blocks", re.IGNORECASE)


@dataclass
class PressureEpisode:
    kind: str  # kv_full | preemption | gpu_memory | oom_error
    window: Window
    levels: list[str]  # load levels running at the time
    detail: str


@dataclass
class MemoryPressure:
    run_id: str
    kv_usage_max: float | None = None
    preemptions: float | None = None
    gpu_mem_share_max: float | None = None
    oom_errors: int = 0
    episodes: list[PressureEpisode] = field(default_factory=list)
    level_order: list[str] = field(default_factory=list)
    evidence_missing: list[str] = field(default_factory=list)

    @property
    def occurred(self) -> bool:
        return bool(self.episodes)

    @property
    def first_level(self) -> str | None:
        """The earliest load level (in run order) during which pressure showed."""
        hit = {lv for e in self.episodes for lv in e.levels}
        return next((lv for lv in self.level_order if lv in hit), None)

    @property
    def headline(self) -> str:
        if not self.occurred:
            looked = "KV usage, preemptions, GPU memory, request errors"
            gaps = f" (no data for: {', '.join(self.evidence_missing)})" if self.evidence_missing else ""
            return f"no memory pressure found in {looked}{gaps}"
        kinds = sorted({e.kind for e in self.episodes})
        return f"memory pressure ({', '.join(kinds)}) from level {self.first_level} on"


def level_spans(table: RequestTable) -> dict[str, Window]:
    df = table.df
    out = {}
    for level_id, rows in table.level_rows().items():
        sent, done = df["t_sent"].to_numpy(float)[rows], df["t_done"].to_numpy(float)[rows]
        out[level_id] = Window(float(np.nanmin(sent)), float(np.nanmax(np.where(np.isfinite(done), done, sent))))
    return out


def _levels_at(spans: dict[str, Window], w: Window) -> list[str]:
    return [lv for lv, s in spans.items() if s.start <= w.end and s.end >= w.start]


def _episodes(series: ProbeSeries, mask: np.ndarray, kind: str, spans, detail) -> list[PressureEpisode]:
    t = series.t
    gaps = np.diff(t)
    step = float(np.median(gaps)) if gaps.size else 1.0
    windows = merge([Window(float(x - step), float(x)) for x in t[mask]], gap_s=1.5 * step)
    return [PressureEpisode(kind, w, _levels_at(spans, w), detail(w)) for w in windows]


def memory_pressure(run: RunDir) -> MemoryPressure:
    if not run.exists():
        raise DiagnosisError(f"{run.path} is not a run directory (no run.json)")
    table = RequestTable.load(run)
    spans = level_spans(table) if len(table) else {}
    mp = MemoryPressure(run.read_info().run_id, level_order=list(spans))
    server = read_probe(run.probe_file("server"), "server")
    if server is not None and "kv_usage" in server.numeric:
        kv = server.numeric["kv_usage"]
        mp.kv_usage_max = float(np.nanmax(kv)) if np.isfinite(kv).any() else None
        mp.episodes += _episodes(
            server,
            np.nan_to_num(kv) >= KV_FULL,
            "kv_full",
            spans,
            lambda w: f"KV cache >= {KV_FULL:.0%} for {w.seconds:.0f} s",
        )
    else:
        mp.evidence_missing.append("KV usage (server probe)")
    if server is not None and "preemptions" in server.numeric:
        pre = np.nan_to_num(server.numeric["preemptions"])
        mp.preemptions = float(pre.sum())
        mp.episodes += _episodes(
            server,
            pre > 0,
            "preemption",
            spans,
            lambda w: f"{pre[(server.t > w.start) & (server.t <= w.end)].sum():.0f} preemptions",
        )
    else:
        mp.evidence_missing.append("preemptions (server probe)")
    gpu = read_probe(run.probe_file("gpu"), "gpu")
    used = [k for k in (gpu.numeric if gpu else {}) if k.endswith(".mem_used_bytes")]
    if gpu is not None and used:
        share = np.nanmax(np.stack([gpu.numeric[k] / gpu.numeric[k.replace("used", "total")] for k in used]), axis=0)
        mp.gpu_mem_share_max = float(np.nanmax(share))
        mp.episodes += _episodes(
            gpu,
            np.nan_to_num(share) >= GPU_MEM_FULL,
            "gpu_memory",
            spans,
            lambda w: f"GPU memory >= {GPU_MEM_FULL:.0%} of total",
        )
    else:
        mp.evidence_missing.append("GPU memory (gpu probe)")
    if len(table):
        df = table.df
        errs = df["error"].fillna("").astype(str)
        oom = (df["status"] != "ok").to_numpy() & errs.str.contains(OOM_ERROR).to_numpy()
        mp.oom_errors = int(oom.sum())
        for i in np.flatnonzero(oom):
            w = Window(float(df["t_sent"].iat[i]), float(np.nan_to_num(df["t_done"].iat[i], nan=df["t_sent"].iat[i])))
            mp.episodes.append(PressureEpisode("oom_error", w, [str(df["level_id"].iat[i])], str(errs.iat[i])[:160]))
    mp.episodes.sort(key=lambda e: e.window.start)
    return mp
