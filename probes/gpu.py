"""`gpu` probe: NVML (nvidia-ml-py) per GPU — utilization, memory, clocks, power, temperature,
clock throttle (event) reasons decoded, PCIe and NVLink throughput, XID errors.

Row fields: gpus = [{index, name, uuid, util_gpu_pct, util_mem_pct, mem_used_bytes,
mem_total_bytes, sm_clock_mhz, mem_clock_mhz, power_w, power_limit_w, temp_c, throttle_mask,
throttle_reasons [names], pcie_tx_kb_s, pcie_rx_kb_s, nvlink_tx_bytes_s, nvlink_rx_bytes_s}],
and xid_events = [{gpu, xid}] seen since the previous row. A metric the GPU does not support is
null. The NVML module is injected, so tests drive the probe with a recorded response set.
"""

from __future__ import annotations

import time

from probes.base import Probe, ProbeUnavailable

# Clock event ("throttle") reason bits, nvml.h nvmlClocksEventReason*.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
NVLINK_TX, NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX: cumulative KiB, all links
XID_EVENT = 8  # nvmlEventTypeXidCriticalError


def decode_throttle(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_BITS)
    return names + ([f"unknown_0x{unknown:x}"] if unknown else [])


def _default_nvml():
    import pynvml

    return pynvml


class GpuProbe(Probe):
    name = "gpu"

    def __init__(self, ctx, nvml=None):
        super().__init__(ctx)
        self.nvml = nvml
        self.handles: list = []
        self.static: list[dict] = []
        self.events = None
        self._nvlink_prev: dict[int, tuple[float, int | None, int | None]] = {}

    def check(self) -> None:
        try:
            self.nvml = self.nvml or _default_nvml()
        except ImportError:
            raise ProbeUnavailable("nvidia-ml-py is not installed") from None
        nv = self.nvml
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise ProbeUnavailable(f"no NVIDIA driver/GPU here (NVML: {exc})") from None
        if count == 0:
            raise ProbeUnavailable("NVML sees no GPU")
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self.handles.append(h)
            self.static.append(
                {
                    "index": i,
                    "name": _text(self._try(nv.nvmlDeviceGetName, h)),
                    "uuid": _text(self._try(nv.nvmlDeviceGetUUID, h)),
                    "power_limit_w": _mw(self._try(nv.nvmlDeviceGetEnforcedPowerLimit, h)),
                }
            )
        self._register_xid()

    def _register_xid(self) -> None:
        nv = self.nvml
        try:
            self.events = nv.nvmlEventSetCreate()
            for h in self.handles:
                nv.nvmlDeviceRegisterEvents(h, XID_EVENT, self.events)
        except nv.NVMLError:
            self.events = None  # not supported (e.g. some VMs, MIG): XID stays unknown

    def _try(self, fn, *args):
        """NVML call, or None when this GPU does not support it (NotSupported, NoPermission...)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def sample(self) -> dict:
        nv = self.nvml
        now = time.time()
        gpus = []
        for h, static in zip(self.handles, self.static):
            g = dict(static)
            util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            g["util_gpu_pct"] = getattr(util, "gpu", None)
            g["util_mem_pct"] = getattr(util, "memory", None)
            mem = self._try(nv.nvmlDeviceGetMemoryInfo, h)
            g["mem_used_bytes"] = getattr(mem, "used", None)
            g["mem_total_bytes"] = getattr(mem, "total", None)
            g["sm_clock_mhz"] = self._try(nv.nvmlDeviceGetClockInfo, h, 1)  # NVML_CLOCK_SM
            g["mem_clock_mhz"] = self._try(nv.nvmlDeviceGetClockInfo, h, 2)  # NVML_CLOCK_MEM
            g["power_w"] = _mw(self._try(nv.nvmlDeviceGetPowerUsage, h))
            g["temp_c"] = self._try(nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
            reasons = (
                getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            mask = self._try(reasons, h)
            g["throttle_mask"] = mask
            g["throttle_reasons"] = decode_throttle(mask) if mask is not None else None
            g["pcie_tx_kb_s"] = self._try(nv.nvmlDeviceGetPcieThroughput, h, 0)
            g["pcie_rx_kb_s"] = self._try(nv.nvmlDeviceGetPcieThroughput, h, 1)
            g.update(self._nvlink(static["index"], h, now))
            gpus.append(g)
        return {"t": now, "gpus": gpus, "xid_events": self._drain_xid()}

    def _nvlink(self, index: int, h, now: float) -> dict:
        vals = self._try(self.nvml.nvmlDeviceGetFieldValues, h, [NVLINK_TX, NVLINK_RX])
        tx = rx = None
        if vals:
            tx, rx = (_field_value(v) for v in vals[:2])
        prev = self._nvlink_prev.get(index)
        self._nvlink_prev[index] = (now, tx, rx)
        out: dict[str, float | None] = {"nvlink_tx_bytes_s": None, "nvlink_rx_bytes_s": None}
        if prev and now > prev[0]:
            dt = now - prev[0]
            if tx is not None and prev[1] is not None:
                out["nvlink_tx_bytes_s"] = round(max(tx - prev[1], 0) * 1024 / dt, 1)
            if rx is not None and prev[2] is not None:
                out["nvlink_rx_bytes_s"] = round(max(rx - prev[2], 0) * 1024 / dt, 1)
        return out

    def _drain_xid(self) -> list[dict]:
        if self.events is None:
            return []
        nv, out = self.nvml, []
        for _ in range(64):  # bounded: a storm of XIDs must not stall the sampler
            try:
                ev = nv.nvmlEventSetWait_v2(self.events, 0)
            except nv.NVMLError:  # NVML_ERROR_TIMEOUT: no event pending
                break
            idx = next((i for i, h in enumerate(self.handles) if h == ev.device), None)
            out.append({"gpu": idx, "xid": int(ev.eventData)})
        return out

    def close(self) -> None:
        if self.nvml is None:
            return
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _mw(value) -> float | None:
    return None if value is None else round(value / 1000.0, 3)  # NVML reports milliwatts


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _field_value(v) -> int | None:
    if getattr(v, "nvmlReturn", 0) != 0:
        return None
    return int(v.value.ullVal)
