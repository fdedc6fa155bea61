"""Parsers of the /proc and /sys files the host probe reads. Pure functions over text, so they are
tested against this machine's files, other machines' recorded files, and fuzzed with garbage
(malformed lines are skipped, never raised on).
"""

from __future__ import annotations

import re

_NODE_PAGE = re.compile(r"\bN(\d+)=(\d+)")
_PAGE_KB = re.compile(r"\bkernelpagesize_kB=(\d+)")


def parse_proc_stat_cpus(text: str) -> dict[str, tuple[int, int]]:
    """/proc/stat -> {"cpu": (busy_jiffies, total_jiffies), "cpu0": ..., ...}.
    busy = total − idle − iowait (iowait is idle time waiting on I/O, not work)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        try:
            vals = [int(x) for x in parts[1:11]]
        except ValueError:
            continue
        if len(vals) < 4:
            continue
        # guest and guest_nice are already counted in user and nice.
        total = sum(vals[:8])
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        out[parts[0]] = (total - idle, total)
    return out


def cpu_busy_pct(prev: dict[str, tuple[int, int]], cur: dict[str, tuple[int, int]]) -> dict[str, float]:
    out = {}
    for name, (busy, total) in cur.items():
        if name not in prev:
            continue
        d_total = total - prev[name][1]
        d_busy = busy - prev[name][0]
        if d_total > 0:
            out[name] = round(100.0 * min(max(d_busy / d_total, 0.0), 1.0), 2)
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {"MemTotal": bytes, ...} (the kB values converted to bytes)."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_loadavg(text: str) -> tuple[float, float, float] | None:
    parts = text.split()
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (IndexError, ValueError):
        return None


def parse_pid_stat(text: str) -> dict | None:
    """/proc/<pid>/stat -> comm, ppid, utime, stime (clock ticks), num_threads, rss_pages, last_cpu.
    The command name is in parentheses and may hold spaces and ')', so split after the last ')'."""
    head, sep, rest = text.rpartition(")")
    if not sep:
        return None
    f = rest.split()
    # f[0] is field 3 (state); field k of proc(5) is f[k - 3].
    try:
        return {
            "comm": head.partition("(")[2],
            "ppid": int(f[1]),
            "utime": int(f[11]),
            "stime": int(f[12]),
            "num_threads": int(f[17]),
            "rss_pages": int(f[21]),
            "last_cpu": int(f[36]),
        }
    except (IndexError, ValueError):
        return None


def parse_pressure(text: str) -> dict[str, float]:
    """/proc/pressure/cpu (PSI) -> {"some_avg10": %, "some_total_us": µs, "full_avg10": ...}.
    "some" is the share of time at least one runnable task waited for a CPU: run-queue contention."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        for item in rest.split():
            key, _, value = item.partition("=")
            try:
                out[f"{kind}_{key}" + ("_us" if key == "total" else "")] = float(value)
            except ValueError:
                continue
    return out


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """/proc/<pid>/task/<tid>/schedstat -> (ns on a CPU, ns runnable but waiting on a run queue).
    The wait is the thread's own account of contention: time it could have run and did not."""
    parts = text.split()
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def parse_proc_stat_steal(text: str) -> tuple[int, int] | None:
    """The aggregate cpu line of /proc/stat -> (steal jiffies, total jiffies); None without a steal column."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu" and len(parts) >= 9:
            try:
                vals = [int(x) for x in parts[1:9]]
            except ValueError:
                return None
            return vals[7], sum(vals)
    return None


def parse_status_lists(text: str) -> dict[str, str]:
    """Cpus_allowed_list and Mems_allowed_list of /proc/<pid>/status."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Cpus_allowed_list", "Mems_allowed_list"):
            out[key] = value.strip()
    return out


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; garbage items are skipped."""
    cpus: list[int] = []
    for item in text.strip().split(","):
        lo, _, hi = item.partition("-")
        try:
            a = int(lo)
            b = int(hi) if hi else a
        except ValueError:
            continue
        if 0 <= a <= b and b - a < 65536:
            cpus.extend(range(a, b + 1))
    return cpus


def parse_numa_maps(text: str, page_size: int = 4096) -> dict[str, int]:
    """/proc/<pid>/numa_maps -> bytes resident per node {"0": bytes, ...}."""
    per_node: dict[str, int] = {}
    for line in text.splitlines():
        m = _PAGE_KB.search(line)
        size = int(m.group(1)) * 1024 if m else page_size
        for node, pages in _NODE_PAGE.findall(line):
            per_node[node] = per_node.get(node, 0) + int(pages) * size
    return per_node
