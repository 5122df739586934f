"""The tensor-parallel group: torch.distributed's default group (or one rank) as the layers see it, and
joining and leaving it."""

from datetime import timedelta

import torch
import torch.distributed as dist

# How long a collective waits for a silent peer. A dead peer is caught much sooner (gloo sees its socket
# close, the engine polls its workers); this only bounds a stuck rank, and must outlast one rank's cold
# torch.compile while another already waits in the next collective.
COLLECTIVE_TIMEOUT = timedelta(minutes=5)


def tp_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def tp_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    if tp_size() > 1:
        dist.all_reduce(tensor)
    return tensor


def tcp_store(port: int, world_size: int) -> dist.TCPStore:
    """The group's rendezvous store on 127.0.0.1. Port 0 starts it on a free port the OS picks (read it back
    as `.port`: no race with other engines on the machine); any other port joins the store there."""
    return dist.TCPStore(
        "127.0.0.1", port, world_size, is_master=port == 0, wait_for_workers=False, timeout=COLLECTIVE_TIMEOUT
    )


def init_tensor_parallel(store: dist.Store, rank: int, world_size: int, device: str) -> None:
    """Join the group; before the model is built, since the layers read tp_size() to shard themselves."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT
    )


def destroy_tensor_parallel() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def min_over_ranks(value: int, device: str) -> int:
    """The smallest `value` over the ranks (KV blocks: every rank must hold each block rank 0 hands out)."""
    if tp_size() == 1:
        return value
    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())
