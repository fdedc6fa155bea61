"""Waiting-queue policies: who is admitted next.

- fcfs: arrival order; a preempted request goes back to the front, so it resumes first.
- priority: lower `request.priority` first, ties by arrival (vLLM's convention).
- sjf: shortest remaining prompt first, with aging so long prompts cannot starve. The effective
  key remaining - rate * (now - arrival) orders requests the same way at every `now` (the
  `- rate * now` term is shared), so it is stored as remaining + rate * arrival in a heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator

from refengine.request import Request

# Heap order: (priority, arrival) for the priority policy, (aged remaining tokens, arrival) for sjf.
SortKey = tuple[float, float]


class RequestQueue:
    """Interface shared by the policies."""

    def add(self, request: Request) -> None:
        raise NotImplementedError

    def prepend(self, request: Request) -> None:
        """Put back a preempted request: at the front for fcfs, at its place for ordered policies."""
        raise NotImplementedError

    def peek(self) -> Request:
        raise NotImplementedError

    def pop(self) -> Request:
        raise NotImplementedError

    def remove(self, request: Request) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Request]:
        raise NotImplementedError

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, request: Request) -> bool:
        return any(r is request for r in self)


class FCFSQueue(RequestQueue):
    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def prepend(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        if not self._queue:
            raise IndexError("peek from an empty request queue")
        return self._queue[0]

    def pop(self) -> Request:
        if not self._queue:
            raise IndexError("pop from an empty request queue")
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class _HeapQueue(RequestQueue):
    """A heap keyed by `_key(request)`; a sequence number breaks ties deterministically."""

    def __init__(self) -> None:
        self._heap: list[tuple[SortKey, int, Request]] = []
        self._seq = itertools.count()

    def _key(self, request: Request) -> SortKey:
        raise NotImplementedError

    def add(self, request: Request) -> None:
        heapq.heappush(self._heap, (self._key(request), next(self._seq), request))

    def prepend(self, request: Request) -> None:
        self.add(request)

    def peek(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty request queue")
        return self._heap[0][2]

    def pop(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty request queue")
        return heapq.heappop(self._heap)[2]

    def remove(self, request: Request) -> None:
        # O(n), but only aborts remove from the middle, and they are rare next to pops.
        kept = [entry for entry in self._heap if entry[2] is not request]
        if len(kept) == len(self._heap):
            raise ValueError(f"request {request.request_id} is not in the queue")
        self._heap = kept
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[2] for entry in sorted(self._heap, key=lambda e: (e[0], e[1])))


class PriorityQueue(_HeapQueue):
    def _key(self, request: Request) -> SortKey:
        return (request.priority, request.arrival_time)


class SJFQueue(_HeapQueue):
    def __init__(self, aging_tokens_per_s: float) -> None:
        super().__init__()
        self.aging_tokens_per_s = aging_tokens_per_s

    def _key(self, request: Request) -> SortKey:
        remaining = request.num_tokens - request.num_computed_tokens
        return (remaining + self.aging_tokens_per_s * request.arrival_time, request.arrival_time)


def create_request_queue(policy: str, aging_rate: float = 0.0) -> RequestQueue:
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    if policy == "sjf":
        return SJFQueue(aging_rate)
    raise ValueError(f"unknown scheduling policy {policy!r}; expected fcfs, priority or sjf")
