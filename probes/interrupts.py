"""/proc/interrupts: parse, group IRQs by device (NIC queues, NVMe, virtio), and measure how
evenly NIC interrupts spread over cores.

A line is `IRQ: count_cpu0 ... count_cpuN  chip  [hwirq-edge]  name`; the architecture rows
(NMI, LOC, ...) have the counts and a description. Rows with fewer counts than CPUs (ERR, MIS)
are padded with zeros. Device names follow the drivers' conventions:
  mlx5_comp7@pci:0000:3b:00.0  (Mellanox completion queue 7)   ens5-TxRx-3 (ixgbe/i40e/ice, ENA)
  eth0-rx-2, eth0-tx-2          virtio2-input.0 / virtio2-output.0 (virtio-net)   nvme0q3
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# (pattern, is_nic): the first group is the device, the queue is the rest of the name.
_DEVICE_PATTERNS = [
    (re.compile(r"^(mlx[45]_comp)(\d+)@(\S+)$"), True),
    (re.compile(r"^(mlx[45]_async)(\d+)@(\S+)$"), True),
    (re.compile(r"^(\S+?)-(?:TxRx|Tx-Rx|rxtx|fp)-?(\d+)$", re.I), True),
    (re.compile(r"^(\S+?)-(?:rx|tx|Rx|Tx)-?(\d+)$"), True),
    (re.compile(r"^(virtio\d+)-(?:input|output)\.(\d+)$"), True),
    (re.compile(r"^(nvme\d+)q(\d+)$"), False),
    (re.compile(r"^(\S+?)[-_.]?(\d+)$"), False),
]


@dataclass
class IrqLine:
    irq: str  # "36", or "LOC" for architecture rows
    counts: list[int]  # per CPU
    name: str  # the device/queue name (last field), or the description
    chip: str = ""
    device: str = ""  # grouped name, e.g. "mlx5_comp@pci:0000:3b:00.0", "ens5", "virtio2"
    nic: bool = False
    numeric: bool = field(default=False)  # a real IRQ number (has /proc/irq/N/smp_affinity_list)


def classify(name: str) -> tuple[str, bool]:
    """Device name and whether it is a NIC queue, from the IRQ's name."""
    for pattern, nic in _DEVICE_PATTERNS:
        m = pattern.match(name)
        if m:
            device = m.group(1)
            if m.re.groups >= 3:  # mlx5: keep the PCI address, it tells the port apart
                device = f"{device}@{m.group(3)}"
            return device, nic
    return name, False


def parse_interrupts(text: str) -> tuple[int, list[IrqLine]]:
    """-> (number of CPUs, lines). Malformed lines are skipped."""
    lines = text.splitlines()
    if not lines:
        return 0, []
    ncpu = sum(1 for tok in lines[0].split() if tok.startswith("CPU"))
    out = []
    for line in lines[1:]:
        head, sep, rest = line.partition(":")
        if not sep or not head.strip() or " " in head.strip():
            continue
        tokens = rest.split()
        counts = []
        for tok in tokens[:ncpu]:
            if not tok.isdigit():
                break
            counts.append(int(tok))
        if not counts:
            continue
        desc = tokens[len(counts) :]
        counts += [0] * (ncpu - len(counts))
        irq = head.strip()
        numeric = irq.isdigit()
        if numeric and desc:
            name = desc[-1]
            chip = " ".join(desc[:-1])
        else:
            name, chip = " ".join(desc), ""
        device, nic = classify(name) if numeric else (irq, False)
        out.append(IrqLine(irq=irq, counts=counts, name=name, chip=chip, device=device, nic=nic, numeric=numeric))
    return ncpu, out


def delta_lines(prev: list[IrqLine], cur: list[IrqLine]) -> list[IrqLine]:
    """Per-IRQ count deltas (an IRQ that appeared since counts from zero; a counter reset counts 0)."""
    before = {(p.irq, p.name): p.counts for p in prev}
    out = []
    for c in cur:
        old = before.get((c.irq, c.name), [0] * len(c.counts))
        d = [max(a - (old[i] if i < len(old) else 0), 0) for i, a in enumerate(c.counts)]
        out.append(IrqLine(c.irq, d, c.name, c.chip, c.device, c.nic, c.numeric))
    return out


def summarize(ncpu: int, deltas: list[IrqLine]) -> dict:
    """One row's fields from deltas: per-CPU totals, per-device totals, NIC imbalance."""
    per_cpu = [0] * ncpu
    nic_per_cpu = [0] * ncpu
    devices: dict[str, dict] = {}
    for d in deltas:
        if not d.numeric:
            continue  # LOC, RES, ... are not device interrupts
        total = sum(d.counts)
        for i, v in enumerate(d.counts[:ncpu]):
            per_cpu[i] += v
            if d.nic:
                nic_per_cpu[i] += v
        if total:
            dev = devices.setdefault(d.device, {"total": 0, "per_cpu": [0] * ncpu, "nic": d.nic, "irqs": 0})
            dev["total"] += total
            dev["irqs"] += 1
            for i, v in enumerate(d.counts[:ncpu]):
                dev["per_cpu"][i] += v
    nic_total = sum(nic_per_cpu)
    busiest = max(range(ncpu), key=lambda i: nic_per_cpu[i]) if ncpu and nic_total else None
    return {
        "ncpu": ncpu,
        "irq_per_cpu": per_cpu,
        "nic_irq_per_cpu": nic_per_cpu,
        "nic_irq_total": nic_total,
        "nic_busiest_cpu": busiest,
        # Share of NIC interrupts on the busiest core: 1/ncpu is perfectly spread, 1.0 is all on one.
        "nic_busiest_share": round(nic_per_cpu[busiest] / nic_total, 4) if busiest is not None else None,
        "devices": devices,
    }
