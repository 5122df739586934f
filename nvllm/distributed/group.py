"""The tensor-parallel group: torch.distributed's default group (or one rank) as the layers see it, and
joining and leaving it."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def nccl_errors_left_to_the_engine() -> Iterator[None]:
    """While a NCCL group is created: by default, torch's NCCL watchdog ends the whole process when a
    collective fails or times out, and rank 0 is the user's process. Mode 2 (CleanUpOnly) only aborts the
    communicators, and the engine, which watches its workers, raises. A mode the user set is kept; the
    variable is read when the group is made, and the process's environment is left as it was."""
    name = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
    user_set = name in os.environ
    os.environ.setdefault(name, "2")
    try:
        yield
    finally:
        if not user_set:
            os.environ.pop(name, None)


def init_tensor_parallel(store: dist.Store, rank: int, world_size: int, device: str) -> None:
    """Join the group; before the model is built, since the layers read tp_size() to shard themselves."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    with nccl_errors_left_to_the_engine():
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT
        )


def destroy_tensor_parallel(abort: bool = False) -> None:
    """Leave the group. A graceful destroy waits for this rank's queued collectives, which never end when a
    peer is gone or out of step: `abort` then makes NCCL end them instead. Either way NCCL first waits for
    every CUDA graph that captured its collectives to be destroyed: release the graphs before this."""
    if not dist.is_initialized():
        return
    if abort and dist.get_backend() == "nccl":
        dist.distributed_c10d._abort_process_group()  # no public API aborts a group yet
    else:
        dist.destroy_process_group()


def min_over_ranks(value: int, device: str) -> int:
    """The smallest `value` over the ranks (KV blocks: every rank must hold each block rank 0 hands out)."""
    if tp_size() == 1:
        return value
    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())
