"""`irq` probe: per-interval deltas of /proc/interrupts grouped by device, NIC interrupt
imbalance, and each NIC IRQ's smp_affinity_list (re-read every AFFINITY_EVERY samples; it
changes only when irqbalance or an operator moves it).

Row fields: dt_s, ncpu, irq_per_cpu, nic_irq_per_cpu, nic_irq_total, nic_busiest_cpu,
nic_busiest_share, devices {device: {total, per_cpu, nic, irqs}}, and (first row, then every
AFFINITY_EVERY samples) nic_affinity {irq: {"name", "affinity"}}.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from probes.base import Probe, ProbeUnavailable, read_text
from probes.interrupts import IrqLine, delta_lines, parse_interrupts, summarize

AFFINITY_EVERY = 30


class IrqProbe(Probe):
    name = "irq"

    def __init__(self, ctx, proc: str = "/proc"):
        super().__init__(ctx)
        self.proc = Path(proc)
        self._prev: list[IrqLine] | None = None
        self._prev_t = 0.0
        self._n = 0

    def check(self) -> None:
        if not sys.platform.startswith("linux"):
            raise ProbeUnavailable(f"needs Linux /proc/interrupts (this is {sys.platform})")
        try:
            ncpu, lines = parse_interrupts(read_text(self.proc / "interrupts"))
        except OSError as exc:
            raise ProbeUnavailable(f"cannot read {self.proc / 'interrupts'}: {exc.strerror or exc}") from None
        if not ncpu or not lines:
            raise ProbeUnavailable(f"{self.proc / 'interrupts'} is not in the expected format")

    def sample(self) -> dict | None:
        now = time.time()
        ncpu, lines = parse_interrupts(read_text(self.proc / "interrupts"))
        prev, prev_t = self._prev, self._prev_t
        self._prev, self._prev_t = lines, now
        if prev is None:
            return None
        row = {"t": now, "dt_s": round(now - prev_t, 4), **summarize(ncpu, delta_lines(prev, lines))}
        if self._n % AFFINITY_EVERY == 0:
            row["nic_affinity"] = self.affinities([x for x in lines if x.nic and x.numeric])
        self._n += 1
        return row

    def affinities(self, lines) -> dict:
        out = {}
        for x in lines:
            try:
                aff = read_text(self.proc / "irq" / x.irq / "smp_affinity_list").strip()
            except OSError:
                aff = None  # gone, or not readable without root
            out[x.irq] = {"name": x.name, "affinity": aff}
        return out
