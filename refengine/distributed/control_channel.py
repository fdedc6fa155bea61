"""The driver's messages to the other ranks: ("step", SchedulerOutput), ("stats", None), ...

Point-to-point on the gloo control group, pickled: the driver posts one `isend` of a length and
one of the bytes to every other rank and does not wait, so under the batch queue it can hand
batch N + 1 to stage 0 while a later stage is still computing batch N. (A broadcast would block
the driver until every rank, the busy last stage included, came back to receive it: gloo sends
only when the receiver has posted its buffer.) Messages between two ranks arrive in the order
they were posted. Workers receive with a blocking `recv`; a driver that dies closes the sockets
and the wait fails at once.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

# Bound at import, before CommTimer may wrap the module's functions: a worker idling for the
# next message is not communication time.
_isend, _recv = dist.isend, dist.recv


@dataclass
class PostedMessage:
    """Sends in progress; the buffers must live until `wait` returns."""

    works: list = field(default_factory=list)
    buffers: list = field(default_factory=list)

    def wait(self) -> None:
        for work in self.works:
            work.wait()
        self.works, self.buffers = [], []


class ControlChannel:
    def __init__(self, group, world_size: int, rank: int):
        self.group, self.world_size, self.rank = group, world_size, rank

    def post(self, kind: str, payload=None) -> PostedMessage:
        """Driver: hand (kind, payload) to every other rank without waiting for them to take it."""
        assert self.rank == 0, "only the driver sends control messages"
        data = torch.frombuffer(bytearray(pickle.dumps((kind, payload))), dtype=torch.uint8)
        size = torch.tensor([data.numel()], dtype=torch.long)
        posted = PostedMessage(buffers=[data, size])
        for dst in range(1, self.world_size):
            posted.works.append(_isend(size, dst=dst, group=self.group))
            posted.works.append(_isend(data, dst=dst, group=self.group))
        return posted

    def send(self, kind: str, payload=None) -> None:
        """Driver: post and wait until every rank has taken it."""
        self.post(kind, payload).wait()

    def receive(self):
        """Worker: the driver's next (kind, payload), blocking."""
        size = torch.empty(1, dtype=torch.long)
        _recv(size, src=0, group=self.group)
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        _recv(data, src=0, group=self.group)
        return pickle.loads(data.numpy().tobytes())
