"""Kill a rank mid-request and check the engine fails with a clear error, quickly (no hang)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from refengine import SamplingParams
from refengine.distributed.executor import RankFailedError

FAIL_WITHIN_S = 5.0


def kill_a_rank_mid_request(engine) -> None:
    engine.add_request([5, 6, 7, 8], SamplingParams(max_tokens=100, ignore_eos=True, temperature=0))
    for _ in range(3):
        engine.step()
    os.kill(engine.executor.procs[0].pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1"):
        while engine.has_unfinished_requests():
            engine.step()
    assert time.monotonic() - t0 < FAIL_WITHIN_S
    assert not engine.healthy
