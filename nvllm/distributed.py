"""The tensor-parallel group as the layers see it: torch.distributed's default group, or one rank."""

import torch
import torch.distributed as dist


def tp_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def tp_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    if tp_size() > 1:
        dist.all_reduce(tensor)
    return tensor
