"""Sentences for the machine around the server: the host's CPU and who used it, and the load
generator's own lateness (requests sent late, streams read in one burst), which makes latencies the
client's rather than the server's."""

from __future__ import annotations

from reports.evidence_words.phrasing import number, seconds


def host_sentences(ev: dict, metric: str) -> list[str]:
    h = ev.get("host") or {}
    busy, cores = number(h, "cpu_pct"), number(h, "cores")
    if busy is None:
        return []
    who = [
        f"the server {h['server_cpu_cores']:.2g} cores" if number(h, "server_cpu_cores") is not None else "",
        f"other processes {h['others_cpu_cores']:.2g}" if number(h, "others_cpu_cores") is not None else "",
    ]
    used = ", ".join(w for w in who if w)
    return [
        f"the host's CPU was {busy:.0f}% busy"
        + (f" over {cores:.0f} cores" if cores else "")
        + (f" ({used})" if used else "")
    ]


def client_lag_sentences(ev: dict, metric: str) -> list[str]:
    lag, limit = number(ev, "send_lag_p99_s"), number(ev, "limit_s")
    if lag is None:
        return []
    late, spikes = number(ev, "spikes_sent_late"), number(ev, "spikes")
    return [
        f"the load generator sent requests {seconds(lag)} late at P99"
        + (f", over its limit of {seconds(limit)}" if limit is not None else "")
        + (f"; {late:.0f} of the {spikes:.0f} spike requests left late" if late is not None and spikes else "")
    ]


def burst_sentences(ev: dict, metric: str) -> list[str]:
    n, judged = number(ev, "burst_streams"), number(ev, "burst_judged")
    if n is None or judged is None:
        return []
    where = ", ".join(ev.get("levels") or [])
    return [
        f"{n:.0f} of the {judged:.0f} streams judged arrived in one burst"
        + (f" (in {where})" if where else "")
        + ": the client read them late, so their latencies are its own"
    ]
