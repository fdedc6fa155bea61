"""The curated panels of each probe: a fixed set, with units and names a person knows.

Each builder takes a probe's flattened series and returns panels (title -> {line -> values}) and
the fields it used; the section renders those panels first and leaves every other field to a
collapsed "all fields" part. Rates are per second over each sample's own interval (`dt_s`, or
the gap between samples). A panel whose fields are absent is simply not drawn, so the same
builder serves refengine, vLLM and SGLang servers, and host probes with or without the
per-process CPU fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from analyzers.probe_series import ProbeSeries

GiB = 2.0**30
# NVML's clock-event (throttle) reason bits, by the names nvidia-smi prints.
THROTTLE_BITS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
    0x100: "display clock setting",
}


@dataclass
class Panels:
    panels: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # "title (unit)" -> lines
    used: set[str] = field(default_factory=set)  # fields shown (or implied)

    def add(self, title: str, lines: Mapping[str, np.ndarray | None], used: list[str]) -> None:
        self.used.update(used)
        shown = {k: v for k, v in lines.items() if v is not None and np.isfinite(v).any()}
        if shown:
            self.panels[title] = shown


Builder = Callable[[ProbeSeries], Panels]
BUILDERS: dict[str, Builder] = {}


def panels_for(name: str) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        BUILDERS[name] = fn
        return fn

    return register


def _dt(s: ProbeSeries) -> np.ndarray:
    if "dt_s" in s.numeric:
        dt = s.numeric["dt_s"].copy()
    else:
        dt = np.r_[np.nan, np.diff(s.t)]
    dt[~(dt > 0)] = np.nan
    return dt


def _get(s: ProbeSeries, key: str, scale: float = 1.0) -> np.ndarray | None:
    v = s.numeric.get(key)
    return None if v is None else v * scale


def _rate(s: ProbeSeries, key: str) -> np.ndarray | None:
    v = s.numeric.get(key)
    return None if v is None else v / _dt(s)


def _indexed(s: ProbeSeries, pattern: str) -> list[tuple[str, str]]:
    """(index, field) for fields like cpu_per_core_pct.0, gpus.1.power_w (pattern with one (\\d+))."""
    rx = re.compile(pattern)
    found = [(m.group(1), k) for k in s.numeric if (m := rx.fullmatch(k))]
    return sorted(found, key=lambda x: int(x[0]))


@panels_for("server")
def server_panels(s: ProbeSeries) -> Panels:
    p = Panels()
    p.add("KV cache usage (%)", {"KV usage": _get(s, "kv_usage", 100)}, ["kv_usage"])
    p.add("requests (count)", {"running": _get(s, "running"), "waiting": _get(s, "waiting")}, ["running", "waiting"])
    p.add("preemptions (/s)", {"preemptions": _rate(s, "preemptions")}, ["preemptions", "preemptions_total"])
    p.add("prefix-cache hit rate (%)", {"hit rate": _get(s, "prefix_cache_hit_rate", 100)}, ["prefix_cache_hit_rate"])
    p.add(
        "server token throughput (tok/s)",
        {"prompt": _get(s, "prompt_tok_s"), "generation": _get(s, "generation_tok_s")},
        ["prompt_tok_s", "generation_tok_s", "prompt_tokens", "generation_tokens"],
    )
    means = {_hist_label(k[: -len("_mean_s")]): s.numeric[k] * 1000 for k in sorted(s.numeric) if k.endswith("_mean_s")}
    p.add("server-side mean latency per scrape interval (ms, sum/count)", dict(list(means.items())[:6]), [])
    p.add("server-side P99 latency per scrape interval (ms)", _p99_lines(s), [])
    for key, title, scale in (
        ("running", "running requests per replica (count)", 1),
        ("waiting", "waiting requests per replica (count)", 1),
        ("kv_usage", "KV cache usage per replica (%)", 100),
    ):
        found = _indexed(s, rf"per_engine\.(\d+)\.{key}")  # a data-parallel server (probes/prom.py)
        if found:
            p.add(title, {f"replica {i}": _get(s, k, scale) for i, k in found}, [k for _, k in found])
    p.used.update(
        {"up", "scrape_s"}
        | {
            k
            for k in s.numeric
            if re.fullmatch(r"\w+_(count|mean_s|p\d+_s|p\d+_lt_s|p\d+_gt_s|p\d+_bucket_s\.[01])", k)
        }
    )
    return p


def _hist_label(h: str) -> str:
    return h.replace("_seconds", "").replace("_", " ")


def _p99_lines(s: ProbeSeries) -> dict[str, np.ndarray]:
    """A line per histogram where the P99 is a number (interpolated within its bucket), and a
    separate "below" line where it is only a bound: a P99 in the first bucket is < its edge (vLLM's
    0.3 s), and drawing that edge as the P99 would invent it (docs/probes.md)."""
    lines: dict[str, np.ndarray] = {}
    for key in sorted(s.numeric):
        m = re.fullmatch(r"(\w+?)_p99_s", key)
        if m and np.isfinite(s.numeric[key]).any():
            lines[_hist_label(m.group(1))] = s.numeric[key] * 1000
        m = re.fullmatch(r"(\w+?)_p99_lt_s", key)
        if m:
            lines[f"{_hist_label(m.group(1))}: below this (first bucket)"] = s.numeric[key] * 1000
    return dict(list(lines.items())[:6])


@panels_for("tcp")
def tcp_panels(s: ProbeSeries) -> Panels:
    p = Panels()
    conns = s.numeric.get("conns_retrans_total")
    conn_rate = None
    if conns is not None:
        conn_rate = np.clip(np.r_[np.nan, np.diff(conns)], 0, None) / _dt(s)
    p.add("target connections' retransmits (/s)", {"target connections": conn_rate}, ["conns_retrans_total"])
    p.add(
        "target connections' RTT (ms)",
        {"mean": _get(s, "conns_rtt_ms_mean"), "max": _get(s, "conns_rtt_ms_max")},
        ["conns_rtt_ms_mean", "conns_rtt_ms_max"],
    )
    p.add(
        "target connections (count)",
        {"established": _get(s, "conns"), "lost": _get(s, "conns_lost")},
        ["conns", "conns_lost"],
    )
    p.add(
        "host-wide TCP retransmits (/s, context)",
        {"retransmitted segments": _rate(s, "Tcp.RetransSegs"), "timeouts": _rate(s, "TcpExt.TCPTimeouts")},
        ["Tcp.RetransSegs", "TcpExt.TCPTimeouts", "retrans_rate", "retrans_per_data"],
    )
    p.add(
        "host-wide TCP segments (/s)",
        {"out": _rate(s, "Tcp.OutSegs"), "in": _rate(s, "Tcp.InSegs")},
        ["Tcp.OutSegs", "Tcp.InSegs", "dt_s"],
    )
    return p


@panels_for("irq")
def irq_panels(s: ProbeSeries) -> Panels:
    p = Panels()
    nic = _indexed(s, r"nic_irq_per_cpu\.(\d+)")
    p.add("NIC interrupts per core (/s)", {f"cpu {i}": _rate(s, k) for i, k in nic}, [k for _, k in nic])
    every = _indexed(s, r"irq_per_cpu\.(\d+)")
    p.add("all device interrupts per core (/s)", {f"cpu {i}": _rate(s, k) for i, k in every}, [k for _, k in every])
    p.add(
        "NIC interrupts on the busiest core (%)",
        {"share": _get(s, "nic_busiest_share", 100)},
        ["nic_busiest_share", "nic_busiest_cpu", "nic_irq_total", "dt_s", "ncpu"],
    )
    return p


@panels_for("host")
def host_panels(s: ProbeSeries) -> Panels:
    p = Panels()
    cores = _indexed(s, r"cpu_per_core_pct\.(\d+)")
    p.add(
        "CPU per core (% busy)",
        {"all cores": _get(s, "cpu_pct"), **{f"cpu {i}": _get(s, k) for i, k in cores}},
        ["cpu_pct"] + [k for _, k in cores],
    )
    p.add(
        "CPU per process (cores)",
        {
            "server": _get(s, "server_cpu_cores"),
            "client": _get(s, "client_cpu_cores"),
            "others": _get(s, "others_cpu_cores"),
        },
        ["server_cpu_cores", "client_cpu_cores", "others_cpu_cores"],
    )
    p.add(
        "memory (GiB)",
        {
            "host used": _get(s, "mem_used_bytes", 1 / GiB),
            "server RSS": _get(s, "server_rss_bytes", 1 / GiB),
            "client RSS": _get(s, "client_rss_bytes", 1 / GiB),
        },
        ["mem_used_bytes", "mem_available_bytes", "server_rss_bytes", "client_rss_bytes"],
    )
    return p


@panels_for("gpu")
def gpu_panels(s: ProbeSeries) -> Panels:
    p = Panels()

    def per_gpu(fld: str, scale: float = 1.0) -> dict[str, np.ndarray | None]:
        return {f"GPU {i}": _get(s, k, scale) for i, k in _indexed(s, rf"gpus\.(\d+)\.{fld}")}

    def used(*fields: str) -> list[str]:
        return [k for f in fields for _, k in _indexed(s, rf"gpus\.(\d+)\.{f}")]

    p.add("GPU utilization (%)", per_gpu("util_gpu_pct"), used("util_gpu_pct", "util_mem_pct"))
    p.add("GPU memory used (GiB)", per_gpu("mem_used_bytes", 1 / GiB), used("mem_used_bytes", "mem_total_bytes"))
    p.add("GPU power (W)", per_gpu("power_w"), used("power_w", "power_limit_w"))
    p.add("SM clock (MHz)", per_gpu("sm_clock_mhz"), used("sm_clock_mhz", "mem_clock_mhz"))
    p.add("GPU temperature (°C)", per_gpu("temp_c"), used("temp_c"))
    throttle: dict[str, np.ndarray | None] = {}
    for i, key in _indexed(s, r"gpus\.(\d+)\.throttle_mask"):
        mask = np.nan_to_num(s.numeric[key]).astype(np.int64)
        for bit, name in THROTTLE_BITS.items():
            if bit != 0x1 and (mask & bit).any():  # "idle" is not a throttle
                throttle[f"GPU {i}: {name}"] = ((mask & bit) > 0).astype(float)
    p.add("throttle reasons (1 = active)", throttle, used("throttle_mask", "index", "throttle_reasons"))
    return p


def curated(series: ProbeSeries) -> Panels | None:
    builder = BUILDERS.get(series.name)
    return builder(series) if builder else None
