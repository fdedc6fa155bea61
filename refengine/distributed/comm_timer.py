"""Opt-in timing of this process's torch.distributed calls (for bench/parallel_scaling.py).

When enabled, the data-path functions (all_reduce, all_gather, all_to_all_single, send, recv)
are wrapped in place on the torch.distributed module, which the layers look up at call time, so
nothing in the model changes. The time includes waiting for peers: on a pipeline stage a recv
also measures the bubble. isend is not timed (it returns at once; its wait is in the peer's recv).
Off by default: the wrappers cost a perf_counter pair per call.
"""

from __future__ import annotations

import time

import torch.distributed as dist

_TIMED = ("all_reduce", "all_gather", "all_to_all_single", "send", "recv")


class CommTimer:
    _originals: dict = {}
    _seconds: dict[str, float] = {}
    _calls: dict[str, int] = {}

    @classmethod
    def enable(cls, on: bool = True) -> None:
        if on and not cls._originals:
            for name in _TIMED:
                cls._originals[name] = getattr(dist, name)
                setattr(dist, name, cls._wrap(name, cls._originals[name]))
        elif not on and cls._originals:
            for name, fn in cls._originals.items():
                setattr(dist, name, fn)
            cls._originals = {}
        cls._seconds, cls._calls = {}, {}

    @classmethod
    def _wrap(cls, name, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                cls._seconds[name] = cls._seconds.get(name, 0.0) + time.perf_counter() - t
                cls._calls[name] = cls._calls.get(name, 0) + 1

        return timed

    @classmethod
    def totals(cls) -> dict:
        return {
            "comm_s": sum(cls._seconds.values()),
            "comm_by_op_s": dict(cls._seconds),
            "comm_calls": dict(cls._calls),
        }
