"""A whole run analyzed: every level's statistics, scaling, SLO answers and findings.

This is what summary.json holds and every report renders. It is computed from the run
directory alone, so `llmbench report` regenerates it for any run, an interrupted one included.
Each level's measured window comes from run.json's `level_meta` (written by the sweep as each
level ends); runs written before that field existed fall back to summary.json's `window_s`,
then to the spec's duration; a level cut short (Ctrl-C, a crash) uses the span of its send times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.bursts import client_wait_share, level_server_itl
from analyzers.cached_prompts import cached_prompts_words, window_hit_rate
from analyzers.findings.run import Finding, run_findings
from analyzers.plan.departures import PredictionCheck, check_prediction
from analyzers.probe_series import ProbeSeries, read_probe
from analyzers.stats.latency import LevelStats
from analyzers.stats.replicas import ReplicaShare, run_replicas
from analyzers.stats.request_classes import all_class_rows
from analyzers.stats.scaling import ScalingPoint, Series, analyze_scaling, best_level_within_slo
from analyzers.stats.slo import Slos
from analyzers.stats.summarize import level_stats
from analyzers.stats.window import Window
from analyzers.validity import mark_cut_short, mark_over_capacity
from rundir import LevelMeta, RunDir, RunInfo, SloSpec
from rundir.table import RequestTable
from rundir.table_cache import load_cached


@dataclass
class RunSummary:
    info: RunInfo
    slos: Slos
    levels: list[LevelStats]
    scaling: dict[str, ScalingPoint]
    series: list[Series]
    findings: list[str] = field(default_factory=list)  # the grouped findings' sentences
    finding_groups: list[Finding] = field(default_factory=list)  # analyzers/findings/run.py
    windows: dict[str, Window] = field(default_factory=dict)  # level (or class) id -> the window used
    classes: list[LevelStats] = field(default_factory=list)  # request classes (analyzers/stats/request_classes.py)
    replicas: list[ReplicaShare] = field(default_factory=list)  # per level and replica (analyzers/stats/replicas.py)
    # prediction.json held against the levels (analyzers/plan/departures.py); None: the run has none
    prediction: PredictionCheck | None = None

    @property
    def best(self) -> LevelStats | None:
        return best_level_within_slo(self.levels)

    def note(self, level_id: str) -> str:
        p = self.scaling.get(level_id)
        return p.note if p else ""

    def to_dict(self) -> dict:
        best = self.best
        levels = []
        for lv in self.levels:
            p = self.scaling.get(lv.level_id)
            levels.append(
                {
                    **lv.to_dict(),
                    "ceiling_note": p.note if p else None,
                    "linearity": p.linearity if p else None,
                    "scaling_efficiency": p.efficiency if p else None,
                }
            )
        return {
            "schema_version": self.info.schema_version,
            "run_id": self.info.run_id,
            "status": self.info.status,
            "slos": self.slos.to_dict(),
            "levels": levels,
            "best_level_within_slo": best.level_id if best else None,
            "series": [
                {"key": s.key, "levels": s.level_ids, "knee": s.knee, "best_within_slo": s.best_within_slo}
                for s in self.series
            ],
            "findings": self.findings,
            "finding_groups": [f.to_dict() for f in self.finding_groups],
            "classes": [c.to_dict() for c in self.classes],
            "replicas": [r.to_dict() for r in self.replicas],
            **({"prediction": self.prediction.to_dict()} if self.prediction is not None else {}),
        }


def level_windows(run: RunDir, info: RunInfo) -> dict[str, Window]:
    windows: dict[str, Window] = {}
    for level_id, meta in info.level_meta.items():
        if meta.window_s:
            windows[level_id] = Window(float(meta.window_s), meta.window_start, meta.window_end)
    try:
        old = run.read_summary() or {}
    except ValueError:  # a summary.json torn by a crash: recomputed from the records anyway
        old = {}
    for lv in old.get("levels", []):
        if lv.get("level_id") not in windows and lv.get("window_s"):
            windows[lv["level_id"]] = Window(float(lv["window_s"]))
    return windows


def summarize_table(
    table: RequestTable,
    info: RunInfo,
    windows: dict[str, Window],
    slos: "Slos | dict | None" = None,
    extra_notes: dict[str, list[str]] | None = None,
    seed: int = 0,
    server: ProbeSeries | None = None,
    host: ProbeSeries | None = None,
) -> RunSummary:
    """Analyze `table` (a run's records). `windows`: level id -> measured window; levels without
    one use the spec's duration, or, for a level cut short (Ctrl-C, a crash), the span of its
    in-window send times. `server`: the server probe's series, whose ITL is the reference that
    tells streams read in one burst, and `host` the host probe's, whose client wait tells whose lag
    they were (analyzers/bursts.py)."""
    slos = Slos.of(slos if slos is not None else info.slos)
    rows_by_level = table.level_rows()
    order = [lv for lv in info.levels_done if lv in rows_by_level]
    order += [lv for lv in rows_by_level if lv not in order]
    levels = []
    used, estimated = {}, set()
    for level_id in order:
        if level_id in windows:
            used[level_id] = windows[level_id]
        else:
            used[level_id], cut_short = _fallback_window(
                table, rows_by_level[level_id], info, level_id in info.levels_done
            )
            if cut_short:
                estimated.add(level_id)
    for i, level_id in enumerate(order):
        rows, window = rows_by_level[level_id], used[level_id]
        lv = level_stats(
            table,
            rows,
            level_id,
            window,
            slos,
            np.random.default_rng([seed, i]),
            level_server_itl(server, table, rows, window.start, window.end),
            client_wait_share(host, window.start, window.end),
        )
        meta = info.level_meta.get(level_id) or LevelMeta()
        lv.notes.extend(meta.notes)
        cached = cached_prompts_words(window_hit_rate(server, window.start, window.end), info.sweep.workload.kind)
        if cached:
            lv.notes.append(cached)
        lv.notes.extend((extra_notes or {}).get(level_id, []))
        if meta.over_capacity:
            mark_over_capacity(lv, meta.over_capacity)
        if meta.cut_short:
            mark_cut_short(lv, lv.window_s, float(meta.nominal_s or info.sweep.duration_s))
        if level_id in estimated:
            lv.notes.append(
                f"the level did not finish: its window ({lv.window_s:.1f} s) is estimated from "
                "the first and last send times"
            )
            mark_cut_short(lv, lv.window_s, float(info.sweep.duration_s))
        levels.append(lv)
    summary = summary_of_levels(info, slos, levels, used, run_replicas(table, order))
    for i, (cid, (level_id, crows)) in enumerate(all_class_rows(table).items()):
        summary.classes.append(
            level_stats(table, crows, cid, used[level_id], slos, np.random.default_rng([seed, 1000 + i]))
        )
        summary.windows[cid] = used[level_id]
    return summary


def _fallback_window(table: RequestTable, rows: np.ndarray, info: RunInfo, finished: bool) -> tuple[Window, bool]:
    """(window, cut short?) for a level whose window was not recorded. A level cut short spans its
    first in-window send to its last completion (its tokens arrived in between)."""
    duration = float(info.sweep.duration_s or 1.0)
    if finished:
        return Window(duration), False
    in_win = table.df["in_window"].to_numpy()[rows]
    sent = table.df["t_sent"].to_numpy()[rows][in_win]
    done = table.df["t_done"].to_numpy()[rows][in_win]
    sent, done = sent[~np.isnan(sent)], done[~np.isnan(done)]
    if sent.size < 2:
        return Window(duration), False
    end = max(float(sent.max()), float(done.max()) if done.size else float(sent.max()))
    if end - sent.min() >= duration:
        return Window(duration), False
    return Window(end - float(sent.min()), float(sent.min()), end), True


def summary_of_levels(
    info: RunInfo,
    slos: "SloSpec | dict",
    levels: list[LevelStats],
    windows: dict[str, Window] | None = None,
    replicas: list[ReplicaShare] | None = None,
) -> RunSummary:
    """Cross-level analysis (scaling, SLO answers, findings) of levels already summarized."""
    scaling, series = analyze_scaling(levels)
    summary = RunSummary(info, Slos.of(slos), levels, scaling, series, windows=windows or {}, replicas=replicas or [])
    summary.finding_groups = run_findings(summary)
    summary.findings = [f.text for f in summary.finding_groups]
    return summary


def analyze_run(run: RunDir, slos: "Slos | dict | None" = None) -> tuple[RunSummary, RequestTable]:
    """Read and analyze a run directory. Raises FileNotFoundError if it is not one."""
    info = run.read_info()
    table = load_cached(run)
    server = read_probe(run.probe_file("server"), "server")
    host = read_probe(run.probe_file("host"), "host")
    summary = summarize_table(table, info, level_windows(run, info), slos, server=server, host=host)
    summary.findings.extend(table.warnings)  # lines of requests.jsonl that were not counted
    prediction = run.read_prediction()
    if prediction is not None:
        summary.prediction = check_prediction(prediction, summary.levels, info.run_id)
    return summary, table
