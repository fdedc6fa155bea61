"""A stand-in for the pynvml module that replays a recorded NVML response set (tests/probes/data/
nvml_*.json). This machine has no GPU: this is the one mock at the edge docs/architecture.md allows.
Each (function, device) pair returns its next recorded response, the last one repeating."""

from __future__ import annotations

import json
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class FakeNvml:
    NVMLError = NVMLError

    def __init__(self, path, missing_library: bool = False):
        self.data = json.loads(open(path).read())
        self.calls: dict[tuple[str, int], int] = {}
        self.missing_library = missing_library
        self.xid_round = 0
        self.pending_xid: list = []
        self.shutdown = False

    def _next(self, fn: str, dev: int):
        seq = self.data["devices"][dev][fn]
        i = self.calls.get((fn, dev), 0)
        self.calls[(fn, dev)] = i + 1
        value = seq[min(i, len(seq) - 1)]
        if value == "NotSupported":
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlInit(self):
        if self.missing_library:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return len(self.data["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return i  # the handle is the index

    def nvmlDeviceGetName(self, h):
        return self._next("nvmlDeviceGetName", h)

    def nvmlDeviceGetUUID(self, h):
        return self._next("nvmlDeviceGetUUID", h)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._next("nvmlDeviceGetEnforcedPowerLimit", h)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(**self._next("nvmlDeviceGetUtilizationRates", h))

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(**self._next("nvmlDeviceGetMemoryInfo", h))

    def nvmlDeviceGetClockInfo(self, h, _clock):
        return self._next("nvmlDeviceGetClockInfo", h)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._next("nvmlDeviceGetPowerUsage", h)

    def nvmlDeviceGetTemperature(self, h, _sensor):
        return self._next("nvmlDeviceGetTemperature", h)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._next("nvmlDeviceGetCurrentClocksEventReasons", h)

    def nvmlDeviceGetPcieThroughput(self, h, _counter):
        return self._next("nvmlDeviceGetPcieThroughput", h)

    def nvmlDeviceGetFieldValues(self, h, _fields):
        return [
            SimpleNamespace(nvmlReturn=v["nvmlReturn"], value=SimpleNamespace(ullVal=v["ullVal"]))
            for v in self._next("nvmlDeviceGetFieldValues", h)
        ]

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        pass

    def nvmlEventSetFree(self, event_set):
        pass

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        """One round of recorded events per sample: drained, then Timeout."""
        if not self.pending_xid:
            rounds = self.data["xid_events"]
            if self.xid_round >= len(rounds) or self.xid_round < 0:
                raise NVMLError_Timeout("Timeout")
            self.pending_xid = list(rounds[self.xid_round]) or [None]
            self.xid_round += 1
        ev = self.pending_xid.pop(0)
        if ev is None:
            raise NVMLError_Timeout("Timeout")
        if not self.pending_xid:
            self.pending_xid = [None]  # the end of this sample's round
        return SimpleNamespace(device=ev["device"], eventData=ev["eventData"], eventType=8)
