"""Tensor-parallel collectives: the one place the model's layers talk to torch.distributed.

The layers call these with their own `tp_size`; at tp_size 1 they are no-ops, so a one-process
engine never touches torch.distributed. `parallel_state.init_process_groups` installs the group
they run over (this stage's TP group under TP x PP; None = the default group).
"""

from __future__ import annotations

import torch

_TP_GROUP = None  # None = the default process group; set_tp_group() narrows it (TP x PP).


def set_tp_group(group) -> None:
    """Install the torch.distributed group the TP collectives run over."""
    global _TP_GROUP
    _TP_GROUP = group


def tp_group():
    """The group the TP collectives run over (also the expert-parallel group); None = the default group."""
    return _TP_GROUP


def tp_all_reduce(x: torch.Tensor, tp_size: int) -> torch.Tensor:
    """Sum partial results across the TP group (row-parallel outputs, vocab-parallel embedding)."""
    if tp_size == 1:
        return x
    import torch.distributed as dist

    dist.all_reduce(x, group=_TP_GROUP)
    return x


def tp_all_gather(x: torch.Tensor, tp_size: int, dim: int = -1) -> torch.Tensor:
    """Concatenate each rank's slice along `dim` (column-parallel gather_output, vocab logits)."""
    if tp_size == 1:
        return x
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(tp_size)]
    dist.all_gather(parts, x.contiguous(), group=_TP_GROUP)
    return torch.cat(parts, dim=dim)
