"""Process groups of one rank: world, its stage's TP group, and the CPU control group.

- world (gloo or NCCL): pipeline send/recv of activations between stages, sampled tokens back
  to the driver. Short timeout: a step that waits longer than `timeout_s` fails the engine.
- tp (same backend): the all-reduces/all-gathers inside a stage, and expert-parallel dispatch.
- control (always gloo, on CPU): the driver's broadcast of each SchedulerOutput and the stats
  gather. Workers idle here between requests, so its timeout is long; a driver that dies closes
  the sockets and the workers' wait fails at once (gloo reports "Connection closed by peer").

Every rank creates every group in the same order (torch.distributed requires it), keeping
the ones it belongs to. The rendezvous is a TCPStore on a port the OS picked (or torchrun's).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch.distributed as dist

from refengine.parallel.layout import ParallelConfig, RankInfo
from refengine.parallel.tp_ops import set_tp_group

CONTROL_TIMEOUT = datetime.timedelta(days=7)


@dataclass
class ProcessGroups:
    info: RankInfo
    backend: str
    tp: dist.ProcessGroup  # this stage's TP group (also the EP group)
    control: dist.ProcessGroup  # gloo group over all ranks, for Python objects


def init_process_groups(pc: ParallelConfig, rank: int, store, backend: str, device_type: str) -> ProcessGroups:
    """Join the world through `store` and build this rank's groups; installs the TP group for the layers."""
    timeout = datetime.timedelta(seconds=pc.timeout_s)
    if not dist.is_initialized():
        dist.init_process_group(backend, store=store, rank=rank, world_size=pc.world_size, timeout=timeout)
    info = pc.rank_info(rank)
    tp_group: dist.ProcessGroup | None = None
    for stage in range(pc.pipeline_parallel_size):
        ranks = list(range(stage * pc.tensor_parallel_size, (stage + 1) * pc.tensor_parallel_size))
        group = dist.new_group(ranks, timeout=timeout, backend=backend)
        if stage == info.pp_rank:
            tp_group = group
    control = dist.new_group(list(range(pc.world_size)), timeout=CONTROL_TIMEOUT, backend="gloo")
    assert tp_group is not None, "every rank is in one stage's TP group"
    set_tp_group(tp_group)
    return ProcessGroups(info=info, backend=backend, tp=tp_group, control=control)


def destroy_process_groups() -> None:
    set_tp_group(None)
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a peer may already be gone; nothing to clean up then
            pass
