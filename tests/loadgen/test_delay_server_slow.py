"""The known-delay server's --slow-fraction (bench/exceedance_calibration.py): a slow request gets its
first token no sooner than --slow-ms after it arrived, the server counts exactly the slow ones, and a
stall makes every request waiting at that moment slow together. Driven in-process by closed-loop
users (no HTTP: the stream generator is the server's own)."""

from __future__ import annotations

import asyncio
import time

import pytest
from delay_server import DelayServer

USERS, TTFT_MS, SLOW_MS = 4, 5.0, 60.0


async def _user(server: DelayServer, stop: float, ttfts: list[float]) -> None:
    while time.monotonic() < stop:
        t0 = time.monotonic()
        first = None
        async for _chunk in server._stream(t0, 2, "ok", False, 4, False):
            first = first if first is not None else time.monotonic() - t0
        ttfts.append(first if first is not None else float("inf"))


def _run(kind: str, fraction: float, seconds: float = 1.5) -> tuple[DelayServer, list[float]]:
    server = DelayServer(TTFT_MS, 1.0, slow_fraction=fraction, slow_ms=SLOW_MS, slow_kind=kind, seed=1)
    ttfts: list[float] = []

    async def main() -> None:
        stop = time.monotonic() + seconds
        await asyncio.gather(*(_user(server, stop, ttfts) for _ in range(USERS)))

    asyncio.run(main())
    return server, ttfts


@pytest.mark.parametrize("kind", ["independent", "stall"])
def test_the_server_counts_exactly_the_requests_it_made_slow(kind):
    server, ttfts = _run(kind, 0.1)
    slow = [t for t in ttfts if t >= SLOW_MS / 1000]
    assert server.slow == len(slow) > 0  # no request is slow by accident, none missed
    assert not server.awaiting  # every request got its first token
    if kind == "independent":
        assert server.stalls == 0
    else:  # a stall catches every waiting request
        assert server.stalls > 0 and server.slow / server.stalls > 1.5


def test_no_fraction_no_slow_request():
    server, ttfts = _run("stall", 0.0, seconds=0.3)
    assert server.slow == server.stalls == 0 and max(ttfts) < SLOW_MS / 1000
