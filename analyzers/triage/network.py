"""P99 checks of the network, first in the seed's order: TCP retransmits and NIC interrupts
piled on one core, each judged by whether it lines up with the spike windows."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlparse

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.evidence import SampleSplit, lift
from analyzers.triage.exposure import differential_in_time, held_windows
from analyzers.triage.tail_windows import TailWindows, Window
from analyzers.triage.throughout import NO_CONTRAST, held_throughout
from rundir.table import RequestTable

MIN_RETRANS = 3  # retransmitted segments in the spikes before they count as evidence
RETRANS_LIFT = 3.0  # ... at this many times the calm's rate per second
NIC_PINNED_SHARE = 0.9  # the busiest core takes this share of NIC interrupts: pinned
MIN_NIC_IRQ_S = 50.0  # NIC interrupts/s below which placement does not matter
CORE_SATURATED_PCT = 90.0

RETRANS_ID, RETRANS_TITLE = "p99.net.retransmits", "TCP retransmits in the spike windows"
IRQ_ID, IRQ_TITLE = "p99.net.irq-affinity", "NIC interrupts spread over cores"
LINK_ID, LINK_TITLE = "p99.net.link-saturation", "links not saturated"
COMM_ID, COMM_TITLE = "p99.net.collectives", "collective bandwidth matches the hardware"


def target_locality(url: str | None, run_hostname: str | None) -> str | None:
    """'loopback' or 'this host' when the network is not in the target's path, else None.

    A literal loopback address (or localhost) is loopback wherever the run is read; "this host"
    (an address of one of this machine's interfaces) is decided only when the run was recorded on
    the machine reading it, since the addresses are this machine's."""
    host = urlparse(url or "").hostname
    if not host:
        return None
    if host == "localhost":
        return "loopback"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.is_loopback:
        return "loopback"
    if run_hostname and run_hostname == socket.gethostname():
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.bind((host, 0))  # binds only to an address this machine owns
            return "this host"
        except OSError:
            return None
    return None


def _host_wide(tcp: SampleSplit) -> str | None:
    n_spike, n_calm, _, _ = tcp.rate("Tcp.RetransSegs")
    if n_spike + n_calm <= 0:
        return None
    return (
        f"other flows on this host retransmitted {n_spike + n_calm:.0f} segments ({n_spike:.0f} during the "
        "spikes), not the target's (host-wide /proc/net/snmp counters)"
    )


def check_retransmits(
    tcp: SampleSplit | None,
    tails: TailWindows,
    locality: str | None = None,
    level_windows: dict[str, Window] | None = None,
    table: RequestTable | None = None,
) -> CheckResult:
    """The target's own connections (`ss` per connection, probe tcp's conns_retrans) decide; the
    host-wide counters count every flow on the host and are context only. Without per-connection
    data the host-wide counters are used, said so, and never ranked high. Retransmits on the
    target's own connections through a whole level are a cause without spikes to line up with
    (analyzers/triage/throughout.py): a healthy path has none."""
    if tcp is None or not tcp.has("Tcp.RetransSegs"):
        return unchecked(RETRANS_ID, "network", RETRANS_TITLE, "no tcp probe in this run (llmbench sweep --probes tcp)")
    context = _host_wide(tcp)
    if locality is not None:
        return passed(
            RETRANS_ID,
            "network",
            RETRANS_TITLE,
            f"the target is on {locality}: the network is not in its path",
            context=context,
            target=locality,
        )
    own = tcp.has("conns_retrans")
    field = "conns_retrans" if own else "Tcp.RetransSegs"
    whose = "the target's connections" if own else "host-wide counters (the target's own connections were not recorded)"
    if own and table is not None:
        by_exposure = _retransmits_by_exposure(tcp, tails, table)
        if by_exposure is not None:
            return by_exposure
    throughout = _retransmits_throughout(tcp, tails, level_windows or {}) if own else None
    if not tails.spikes:
        return throughout or passed(
            RETRANS_ID, "network", RETRANS_TITLE, "no spike windows to compare", context=context
        )
    n_spike, n_calm, r_spike, r_calm = tcp.rate(field)
    rto_spike = tcp.rate("conns_rto")[0] if own else tcp.rate("TcpExt.TCPTimeouts")[0]
    ratio = lift(r_spike, r_calm)
    evidence = dict(
        source=field,
        retrans_in_spikes=n_spike,
        retrans_in_calm=n_calm,
        retrans_per_s_spikes=r_spike,
        retrans_per_s_calm=r_calm,
        rto_in_spikes=rto_spike,
        lift=ratio if np.isfinite(ratio) else "only in spikes",
    )
    if own:
        evidence["host_wide_retrans"] = tcp.rate("Tcp.RetransSegs")[0] + tcp.rate("Tcp.RetransSegs")[1]
    if n_spike < MIN_RETRANS or ratio < RETRANS_LIFT:
        return throughout or passed(
            RETRANS_ID,
            "network",
            RETRANS_TITLE,
            f"{n_spike:.0f} retransmits on {whose} in the spikes ({r_spike:.2f}/s) vs {r_calm:.2f}/s in the calm",
            context=context if own else None,
            **evidence,
        )
    explains = tcp.windows_where(tails, np.nan_to_num(tcp.values(field)) > 0)
    severity = ("high" if rto_spike > 0 or ratio >= 10 else "medium") if own else "medium"
    finding = Finding(
        RETRANS_ID,
        "network",
        severity,
        f"TCP retransmits on {whose} burst in the spike windows: {n_spike:.0f} segments "
        f"({r_spike:.1f}/s) vs {r_calm:.2f}/s in the calm"
        + (
            f", {rto_spike:.0f} in RTO backoff"
            if rto_spike and own
            else f", {rto_spike:.0f} RTO timeouts"
            if rto_spike
            else ""
        ),
        evidence,
        explains,
        len(tails.spikes),
        "find the lossy hop: `llmbench sweep --probes tcp,capture` then `llmdiag pcap` per flow; "
        "check NIC/switch counters and ring buffer drops (ethtool -S)",
    )
    return failed(finding, RETRANS_TITLE, finding.title)


def _retransmits_by_exposure(tcp: SampleSplit, tails: TailWindows, table: RequestTable) -> CheckResult | None:
    """Retransmits on the target's own connections as a condition in time (analyzers/triage/exposure.py):
    the requests that lived through them against those that did not."""
    retrans = np.nan_to_num(tcp.values("conns_retrans"))
    found = differential_in_time(table, tails.metric, held_windows(tcp.start, tcp.end, retrans > 0))
    if found is None or not found.diff.separates:
        return None
    diff, held = found.diff, retrans > 0
    n, rto = float(retrans[held].sum()), float(np.nan_to_num(tcp.values("conns_rto"))[held].sum())
    evidence = dict(
        source="conns_retrans",
        **diff.evidence(),
        retrans_when_held=n,
        rto_intervals_when_held=rto,
        retrans_seconds=round(found.seconds, 1),
    )
    finding = Finding(
        RETRANS_ID,
        "network",
        "high" if rto or diff.attributable >= 0.6 else "medium",
        f"TCP retransmits on the target's connections: {n:.0f} segments in {found.seconds:.0f} s"
        + (f", connections in RTO backoff in {rto:.0f} intervals" if rto else "")
        + "; "
        + diff.words(tails.metric, f"the {found.seconds:.0f} s of retransmits"),
        evidence,
        found.windows,
        len(tails.spikes),
        "find the lossy hop: `llmbench sweep --probes tcp,capture` then `llmdiag pcap` per flow; "
        "check NIC/switch counters and ring buffer drops (ethtool -S)",
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, RETRANS_TITLE, finding.title)


def _retransmits_throughout(tcp: SampleSplit, tails: TailWindows, windows: dict[str, Window]) -> CheckResult | None:
    """The target's own connections retransmitted in nearly every probe interval of a level."""
    retrans = np.nan_to_num(tcp.values("conns_retrans"))
    held = held_throughout(tcp, retrans > 0, windows)
    if not held:
        return None
    rows = np.unique(np.concatenate([h.rows for h in held]))
    n = float(retrans[rows].sum())
    if n < MIN_RETRANS:
        return None
    seconds = float((tcp.end[rows] - tcp.start[rows]).sum())
    rto = float(np.nan_to_num(tcp.values("conns_rto"))[rows].sum())
    evidence = dict(
        source="conns_retrans",
        throughout_levels=[h.level_id for h in held],
        retrans_throughout=n,
        retrans_per_s_throughout=round(n / seconds, 2) if seconds else None,
        rto_intervals_throughout=rto,
    )
    finding = Finding(
        RETRANS_ID,
        "network",
        "high" if rto else "medium",
        f"TCP retransmits on the target's connections throughout {', '.join(h.words() for h in held)}: "
        f"{n:.0f} segments ({n / seconds if seconds else 0:.1f}/s)"
        + (f", connections in RTO backoff in {rto:.0f} intervals" if rto else "")
        + f"; {NO_CONTRAST}",
        evidence,
        [h.window for h in held],
        len(tails.spikes),
        "find the lossy hop: `llmbench sweep --probes tcp,capture` then `llmdiag pcap` per flow; "
        "check NIC/switch counters and ring buffer drops (ethtool -S)",
        kind="throughout",
    )
    return failed(finding, RETRANS_TITLE, finding.title)


def check_irq_affinity(
    irq: SampleSplit | None, host: SampleSplit | None, tails: TailWindows, locality: str | None = None
) -> CheckResult:
    if irq is None or not irq.has("ncpu"):
        return unchecked(IRQ_ID, "network", IRQ_TITLE, "no irq probe in this run (llmbench sweep --probes irq)")
    if locality is not None:
        return passed(
            IRQ_ID, "network", IRQ_TITLE, f"the target is on {locality}: its traffic crosses no NIC", target=locality
        )
    total = np.nan_to_num(irq.values("nic_irq_total"))
    dt = np.maximum(irq.end - irq.start, 1e-9)
    per_s = total / dt
    ncpu = int(np.nanmax(irq.values("ncpu")))
    if ncpu < 2 or not (per_s >= MIN_NIC_IRQ_S).any():
        return passed(
            IRQ_ID,
            "network",
            IRQ_TITLE,
            f"NIC interrupts under {MIN_NIC_IRQ_S:g}/s (or one CPU): placement does not matter here",
            nic_irq_per_s_max=float(per_s.max(initial=0.0)),
            ncpu=ncpu,
        )
    share = irq.values("nic_busiest_share")
    busy = (per_s >= MIN_NIC_IRQ_S) & np.isfinite(share)
    pinned = busy & (share >= NIC_PINNED_SHARE)
    median_share = float(np.median(share[busy]))
    busiest = irq.values("nic_busiest_cpu")[busy]
    core = int(np.bincount(busiest[np.isfinite(busiest)].astype(int)).argmax()) if np.isfinite(busiest).any() else None
    evidence: dict[str, Any] = dict(
        ncpu=ncpu,
        nic_irq_per_s_median=float(np.median(per_s[busy])),
        busiest_core=core,
        busiest_core_share_median=median_share,
        even_share=1.0 / ncpu,
        pinned_intervals=int(pinned.sum()),
        busy_intervals=int(busy.sum()),
    )
    if median_share < NIC_PINNED_SHARE:
        return passed(
            IRQ_ID,
            "network",
            IRQ_TITLE,
            f"the busiest core takes {median_share:.0%} of NIC interrupts (even would be {1 / ncpu:.0%})",
            **evidence,
        )
    core_busy = _core_busy(host, irq, core)
    if core_busy is not None:
        evidence["busiest_core_cpu_pct_spikes"], evidence["busiest_core_cpu_pct_calm"] = core_busy
    saturated = core_busy is not None and (core_busy[0] or 0) >= CORE_SATURATED_PCT
    # Pinned IRQs are a standing condition; the windows they explain are those where the NIC was
    # busy above its own median while pinned.
    loaded = pinned & (per_s >= np.median(per_s[busy]))
    explains = irq.windows_where(tails, loaded)
    finding = Finding(
        IRQ_ID,
        "network",
        "high" if saturated or len(explains) else "medium",
        f"{median_share:.0%} of NIC interrupts land on cpu{core} of {ncpu}"
        + (f", which ran {core_busy[0]:.0f}% busy in the spikes" if core_busy and core_busy[0] else ""),
        evidence,
        explains,
        len(tails.spikes),
        "spread the NIC queues' IRQs over cores (irqbalance, or write smp_affinity_list per queue; "
        "enable RSS/RPS), keeping them off the cores the engine's threads use",
    )
    return failed(finding, IRQ_TITLE, finding.title)


def _core_busy(
    host: SampleSplit | None, irq: SampleSplit, core: int | None
) -> tuple[float | None, float | None] | None:
    field = f"cpu_per_core_pct.{core}"
    if host is None or core is None or not host.has(field):
        return None
    return host.mean(field)


def check_link_saturation() -> CheckResult:
    return unchecked(
        LINK_ID,
        "network",
        LINK_TITLE,
        "no probe records NIC bytes/s against link speed yet (check `sar -n DEV 1` or the switch during a run)",
    )


def check_collectives() -> CheckResult:
    return unchecked(
        COMM_ID,
        "network",
        COMM_TITLE,
        "no collective results in the run; run `llmdiag comm` on the "
        "nodes and compare busbw with the interconnect's rating",
    )
