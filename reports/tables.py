"""The report's tables as plain rows of text, shared by the HTML and the Markdown renderers (which
escape them), and the raw-number table that becomes summary.csv."""

from __future__ import annotations

import json
import time

import pandas as pd

from analyzers.stats.distribution import PERCENTILES, pname
from analyzers.stats.latency import LevelStats
from analyzers.summary import RunSummary
from reports.terminal import lengths, load_label, tok_s_text
from rundir import RunInfo

SUMMARY_HEADER = [
    "level",
    "load",
    "in",
    "out",
    "output tok/s (95% CI)",
    "TTFT P50/P99 ms",
    "TPOT P50/P95 ms",
    "E2E P99 s",
    "req/s",
    "goodput req/s",
    "n (ok)",
    "errors",
    "SLO",
    "note",
]
DETAIL_HEADER = ["level", "metric", "n", "mean"] + [pname(q).upper() for q in PERCENTILES] + ["P95 CI", "P99 CI"]


def _ms(v: float | None, digits: int = 0) -> str:
    return "—" if v is None else f"{v * 1000:.{digits}f}"


def _ci(ci, scale: float = 1000, digits: int = 0) -> str:
    return "—" if not ci else f"{ci[0] * scale:.{digits}f}–{ci[1] * scale:.{digits}f}"


def slo_word(lv: LevelStats) -> str:
    return {True: "met", False: "missed", None: "—"}[lv.slo_met]


def length_rows(s: RunSummary) -> list[list[str]]:
    """What was really sent and received, per level (successful requests in the window)."""

    def one(mean, rng):
        return "—" if mean is None else f"{mean:.1f} ({rng[0]:.0f}–{rng[1]:.0f})"

    return [
        [
            lv.level_id,
            f"{lv.input_len}/{lv.output_len}",
            one(lv.prompt_tokens_mean, lv.prompt_tokens_range),
            one(lv.output_tokens_mean, lv.output_tokens_range),
        ]
        for lv in s.levels
    ]


def summary_rows(s: RunSummary, levels: "list[LevelStats] | None" = None) -> list[list[str]]:
    """One row per level (or per entry of `levels`, e.g. the request classes)."""
    rows = []
    for lv in s.levels if levels is None else levels:
        star = "*" if lv.ttft.n and not lv.ttft.p99_reliable else ""
        errors = lv.n_error + lv.n_timeout
        rows.append(
            [
                lv.level_id,
                load_label(lv),
                *lengths(lv),
                tok_s_text(lv, _ci(lv.output_tok_s_ci, 1, 1)),
                f"{_ms(lv.ttft.p['p50'])}/{_ms(lv.ttft.p['p99'])}{star}",
                f"{_ms(lv.tpot.p['p50'], 1)}/{_ms(lv.tpot.p['p95'], 1)}",
                "—" if lv.e2e.p["p99"] is None else f"{lv.e2e.p['p99']:.2f}",
                f"{lv.req_s:.2f}",
                f"{lv.goodput_req_s:.2f}",
                f"{lv.n_in_window} ({lv.n_ok})",
                f"{errors} ({lv.error_rate:.1%})" if errors else "0",
                slo_word(lv),
                s.note(lv.level_id),
            ]
        )
    return rows


REPLICA_HEADER = ["level", "replica", "requests (ok)", "TTFT P99 ms", "share of requests", "share of output tokens"]


def replica_rows(s: RunSummary) -> list[list[str]]:
    """One row per level and replica of a fleet (analyzers/stats/replicas.py); none for one server.
    Replicas driven directly are named by their index in --target's list: the row adds its URL."""
    urls = s.info.target.urls
    return [
        [
            r.level_id,
            replica_label(r.replica, urls),
            f"{r.requests} ({r.ok})",
            _ms(r.ttft_p99_s) + ("" if r.p99_reliable or r.ttft_p99_s is None else "*"),
            f"{r.request_share:.0%}",
            f"{r.token_share:.0%}",
        ]
        for r in s.replicas
    ]


def replica_label(name: str, urls: list[str]) -> str:
    """A replica's name as the tables show it: with its URL when it is an index into the URLs the
    client drove (run.json target.urls; docs/run-format.md, `replica`)."""
    return f"{name} ({urls[int(name)]})" if name.isdigit() and int(name) < len(urls) else name


SCALING_HEADER = [
    "level",
    "load",
    "output tok/s",
    "linearity vs lowest load",
    "efficiency vs level below",
    "TTFT P99 ms",
    "note",
]


def scaling_rows(s: RunSummary) -> list[list[str]]:
    """Per series, by load: how linear throughput stayed and where it stopped growing (the knee)."""
    rows = []
    by_id = {lv.level_id: lv for lv in s.levels}
    for ser in s.series:
        for level_id in ser.level_ids:
            lv, p = by_id[level_id], s.scaling[level_id]
            knee = " (knee)" if level_id == ser.knee else ""
            rows.append(
                [
                    level_id + knee,
                    load_label(lv),
                    tok_s_text(lv),
                    "—" if p.linearity is None else f"{p.linearity:.0%}",
                    "—" if p.efficiency is None else f"{p.efficiency:.2f}",
                    _ms(lv.ttft.p["p99"]),
                    p.note,
                ]
            )
    return rows


def detail_rows(s: RunSummary) -> list[list[str]]:
    rows = []
    for lv in s.levels:
        for name in ("ttft", "tpot", "itl", "e2e", "send_lag"):
            d = getattr(lv, name)
            digits = 1 if name in ("tpot", "itl") else 0
            rows.append(
                [lv.level_id, name.upper().replace("_", " ") + " ms", str(d.n), _ms(d.mean, digits)]
                + [_ms(d.p[pname(q)], digits) for q in PERCENTILES]
                + [_ci(d.ci.get("p95"), digits=digits), _ci(d.ci.get("p99"), digits=digits)]
            )
    return rows


def error_rows(s: RunSummary) -> list[list[str]]:
    rows = []
    for lv in s.levels:
        for kind, count in sorted(lv.errors_by_kind.items()):
            rows.append(
                [lv.level_id, kind, str(count), f"{count / max(lv.n_in_window, 1):.1%}", lv.error_samples.get(kind, "")]
            )
    return rows


def config_rows(info: RunInfo) -> list[tuple[str, str]]:
    t, sw = info.target, info.sweep
    loads: list[int] | list[str] = sw.concurrency or [f"{r:g}/s" for r in sw.request_rate]

    def when(ts):
        return "—" if not ts else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))

    return [
        ("run", f"{info.run_id} ({info.status})"),
        (
            "target",
            f"{t.kind} · {', '.join(t.urls) or t.url or 'bundled engine on loopback'} · "
            f"endpoint {t.endpoint}"
            + (f" · {t.replicas} replicas" if t.replicas > 1 else "")
            + (f" balanced {t.lb_policy}" if t.lb_policy else ""),
        ),
        ("model", str(t.model)),
        ("engine args", " ".join(map(str, t.engine_args)) or "—"),
        (
            "levels",
            f"{'concurrency' if sw.concurrency else 'request rate'} {', '.join(map(str, loads))} × "
            f"input {sw.input_lens} × output {sw.output_lens}",
        ),
        (
            "per level",
            f"warm-up {sw.warmup_s} s, measured {sw.duration_s} s, "
            f"timeout {sw.request_timeout_s} s, {sw.workers} worker(s)",
        ),
        ("workload", json.dumps(sw.workload.to_dict(), sort_keys=True)),
        ("SLOs", json.dumps(info.slos.to_dict(), sort_keys=True)),
        ("started / finished", f"{when(info.started)} / {when(info.finished)}"),
        ("host", ", ".join(f"{k} {v}" for k, v in (info.host or {}).items())),
        ("probes", ", ".join(f"{k}: {v}" for k, v in (info.probes or {}).items()) or "none"),
        ("command", " ".join(map(str, info.command or []))),
        ("tool", f"llmbench {info.tool_version}, run format v{info.schema_version}"),
    ]


def _ci_columns(name: str, ci: list[float] | None) -> dict:
    return {f"{name}_ci_low": ci[0] if ci else None, f"{name}_ci_high": ci[1] if ci else None}


def csv_frame(s: RunSummary) -> pd.DataFrame:
    """One row per level, raw numbers in seconds and per-second rates (summary.csv)."""
    rows = []
    for lv in s.levels:
        row = {
            "level_id": lv.level_id,
            "concurrency": lv.concurrency,
            "request_rate": lv.request_rate,
            "input_len": lv.input_len,
            "output_len": lv.output_len,
            "window_s": lv.window_s,
            "n_sent": lv.n_sent,
            "n_in_window": lv.n_in_window,
            "n_ok": lv.n_ok,
            "n_error": lv.n_error,
            "n_timeout": lv.n_timeout,
            "n_cancelled": lv.n_cancelled,
            "error_rate": lv.error_rate,
            "prompt_tokens_mean": lv.prompt_tokens_mean,
            "output_tokens_mean": lv.output_tokens_mean,
            "output_tok_s": lv.output_tok_s,
            "total_tok_s": lv.total_tok_s,
            "req_s": lv.req_s,
            **_ci_columns("output_tok_s", lv.output_tok_s_ci),
            **_ci_columns("total_tok_s", lv.total_tok_s_ci),
            **_ci_columns("req_s", lv.req_s_ci),
            **_ci_columns("goodput_req_s", lv.goodput_req_s_ci),
            "goodput_req_s": lv.goodput_req_s,
            "slo_met": lv.slo_met,
            "note": s.note(lv.level_id),
            "token_count_mismatches": lv.token_count_mismatches,
            "output_len_unhonoured": lv.output_len_unhonoured,
        }
        for name in ("ttft", "tpot", "itl", "e2e", "send_lag"):
            d = getattr(lv, name)
            row[f"{name}_n"] = d.n
            row[f"{name}_mean_s"] = d.mean
            for q in PERCENTILES:
                row[f"{name}_{pname(q)}_s"] = d.p[pname(q)]
        rows.append(row)
    return pd.DataFrame(rows)
