"""Host-to-device copies that never wait for the device."""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`, copied without blocking the host. A copy to a GPU from ordinary (pageable)
    memory may wait for the work already queued on the device: a decode round's later steps would then
    run one at a time behind the host instead of queueing up. Pinned memory is copied asynchronously."""
    if torch.device(device).type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def copy_from_host(destination: torch.Tensor, source: torch.Tensor) -> None:
    """Copy the host tensor `source` into `destination` (a static buffer, say), without blocking the host:
    through pinned memory when `destination` is on a GPU, as in `to_device`."""
    destination.copy_(source.pin_memory() if destination.is_cuda else source, non_blocking=True)
