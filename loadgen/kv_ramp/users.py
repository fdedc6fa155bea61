"""The ramp's load: closed-loop users on one asyncio client, added level by level without draining
(a drained level never fills the cache), each answer counted on the level being measured."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from loadgen.kv_ramp.observation import LevelObservation
from loadgen.kv_ramp.spec import RampSpec


@dataclass
class RampUsers:
    """The ramp's closed-loop users: each sends its next request as soon as its last one returned,
    and counts the answer on the level being measured when it arrives."""

    client: Any  # an httpx.AsyncClient
    spec: RampSpec
    make_body: Callable[[int], dict]
    level: LevelObservation | None = None
    completion_tokens: set[int] = field(default_factory=set)
    sent: Iterator[int] = field(default_factory=itertools.count)
    tasks: list[asyncio.Task] = field(default_factory=list)

    def _measuring(self) -> LevelObservation:
        """The level being measured when an answer arrives (users start once the first one is set)."""
        assert self.level is not None, "the ramp sets a level before it starts users"
        return self.level

    def grow_to(self, concurrency: int) -> None:
        # Users are only added, never restarted: a level starts with the previous one's requests in flight.
        self.tasks += [asyncio.create_task(self._user()) for _ in range(concurrency - len(self.tasks))]

    async def _user(self) -> None:
        import httpx

        while True:
            body = self.make_body(next(self.sent))
            try:
                resp = await self.client.post(self.spec.target + "/v1/completions", json=body)
                if resp.status_code == 200:
                    self._measuring().ok += 1
                    self.completion_tokens.add(int((resp.json().get("usage") or {}).get("completion_tokens", -1)))
                else:
                    self._measuring().errors += 1
                    self._measuring().error_text = f"HTTP {resp.status_code}: {resp.text[:120]}"
            except httpx.HTTPError as exc:
                self._measuring().errors += 1
                self._measuring().error_text = f"{type(exc).__name__}: {exc}"[:160]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()  # closing the connections aborts the requests server-side
        await asyncio.gather(*self.tasks, return_exceptions=True)
