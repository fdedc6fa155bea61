"""Tensor, pipeline and expert parallelism over torch.distributed (see docs/distributed.md)."""
