"""What a workload yields (RequestSpec) and the stream of them (Workload): shared by every kind
(loadgen.workloads, loadgen.trace_workload, loadgen.sessions_workload)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass
class RequestSpec:
    prompt: list[int] | str
    target_input_len: int  # prompt tokens intended (0: unknown, a text prompt without a tokenizer)
    target_output_len: int
    max_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the request body last
    client_prompt_tokens: int | None = None  # the prompt's count as the server will make it, when known exactly
    arrival_s: float | None = None  # trace: send this long after the level started (open loop), not a drawn gap
    messages: list[dict[str, str]] | None = None  # sessions: the chat history the chat endpoint sends
    extra_meta: dict[str, Any] = field(default_factory=dict)  # what the request is (session, turn); not sent


class Workload:
    """A deterministic stream of RequestSpecs: endless, repeating with `period` when that is set,
    or ending after `length` requests (a trace played once: loadgen.trace_workload)."""

    def __init__(
        self,
        options: Any,
        make: Callable[[int], RequestSpec],
        period: int | None,
        rebuildable: bool = True,
        length: int | None = None,
    ):
        if length is not None and length < 1:
            raise ValueError(f"a finite workload has at least one request, got length={length}")
        self.options = options
        self.period = period
        self.rebuildable = rebuildable  # make_workload(self.options) gives the same requests
        self.length = length
        self._make = make

    def has(self, i: int) -> bool:
        """Whether request i exists (always, unless the stream ends after `length`)."""
        return self.length is None or i < self.length

    def spec(self, i: int) -> RequestSpec:
        return self._make(i % self.period if self.period else i)

    def take(self, n: int, start: int = 0) -> list[RequestSpec]:
        return [self.spec(i) for i in range(start, start + n)]

    def __iter__(self) -> Iterator[RequestSpec]:
        i = 0
        while self.has(i):
            yield self.spec(i)
            i += 1
