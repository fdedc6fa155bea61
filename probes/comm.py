"""`llmdiag comm`: collective bandwidth over torch.distributed (gloo on CPU, NCCL on GPUs).

Launched either by us (`--nprocs N`: N local processes, torch.multiprocessing spawn, a free
loopback port) or by torchrun across machines (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK in the environment). Every rank times each op and size; rank 0 gathers the per-rank
times and builds the nccl-tests table (probes/comm_table.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass

from probes.comm_table import OPS, CommRow, make_row
from rundir.ports import free_port

DTYPE_BYTES = 4  # float32: gloo's fastest path, and what nccl-tests uses by default


@dataclass
class CommSpec:
    backend: str = "gloo"
    ops: tuple[str, ...] = OPS
    sizes: tuple[int, ...] = (1 << 10, 1 << 20)
    iters: int = 20
    warmup: int = 5

    def __post_init__(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"--backend must be gloo or nccl, got {self.backend!r}")
        bad = [op for op in self.ops if op not in OPS]
        if bad:
            raise ValueError(f"unknown op {bad[0]!r}; choose from {', '.join(OPS)}")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError("--iters must be >= 1 and --warmup >= 0")


def _buffers(op: str, size: int, n: int, rank: int, device):
    """Tensors for one op at nccl-tests' `size` and the closure that runs it once."""
    import torch
    import torch.distributed as dist

    count = max(size // DTYPE_BYTES // n * n, n)  # divisible by n for the per-rank splits
    full = torch.ones(count, dtype=torch.float32, device=device)
    part = torch.ones(count // n, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return count, lambda: dist.all_reduce(full)
    if op == "all_gather":
        return count, lambda: dist.all_gather_into_tensor(full, part)
    if op == "reduce_scatter":
        return count, lambda: dist.reduce_scatter_tensor(part, full)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return count, lambda: dist.all_to_all_single(out, full)
    if op == "sendrecv":
        recv = torch.empty_like(full)
        nxt, prv = (rank + 1) % n, (rank - 1) % n

        def sendrecv():
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, full, nxt), dist.P2POp(dist.irecv, recv, prv)])
            for r in reqs:
                r.wait()

        return count, sendrecv
    raise ValueError(op)


def run_rank(spec: CommSpec, rank: int, n: int, local_rank: int) -> list[CommRow] | None:
    """One rank's work (the process group is already initialized). Rank 0 returns the table."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", local_rank) if spec.backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if spec.backend == "nccl" else (lambda: None)
    measured: list[tuple[str, int, int, float]] = []
    for op in spec.ops:
        for size in spec.sizes:
            count, run_once = _buffers(op, size, n, rank, device)
            for _ in range(spec.warmup):
                run_once()
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(spec.iters):
                run_once()
            sync()
            measured.append((op, size, count, (time.perf_counter() - t0) / spec.iters))
    gathered: list = [None] * n
    dist.all_gather_object(gathered, [m[3] for m in measured])
    if rank != 0:
        return None
    return [
        make_row(op, count * DTYPE_BYTES, count, "float32", n, [g[i] for g in gathered])
        for i, (op, _size, count, _t) in enumerate(measured)
    ]


def _spawned(local_rank: int, spec: CommSpec, n: int, port: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    if spec.backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(spec.backend, init_method=f"tcp://127.0.0.1:{port}", rank=local_rank, world_size=n)
    try:
        rows = run_rank(spec, local_rank, n, local_rank)
        if rows is not None:
            with open(out_path, "w") as f:
                json.dump([asdict(r) for r in rows], f)
    finally:
        dist.destroy_process_group()


def run_local(spec: CommSpec, nprocs: int) -> list[CommRow]:
    """N processes on this machine; returns rank 0's table."""
    import torch.multiprocessing as mp

    if nprocs < 2:
        raise ValueError("--nprocs must be >= 2 (a collective needs two ranks)")
    with tempfile.TemporaryDirectory(prefix="llmbench-comm-") as tmp:
        out_path = os.path.join(tmp, "rows.json")
        mp.spawn(_spawned, args=(spec, nprocs, free_port(), out_path), nprocs=nprocs, join=True)
        with open(out_path) as f:
            return [CommRow(**r) for r in json.load(f)]


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_torchrun(spec: CommSpec) -> tuple[int, int, list[CommRow] | None]:
    """Under torchrun: (rank, world size, table on rank 0 else None)."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if spec.backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(spec.backend)
    try:
        rank, n = dist.get_rank(), dist.get_world_size()
        return rank, n, run_rank(spec, rank, n, local_rank)
    finally:
        dist.destroy_process_group()
