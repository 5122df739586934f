"""A batch queued on the device, and the copy of its sampled tokens to the host."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvllm.engine.scheduler import ScheduledBatch


class LaunchedBatch:
    """A batch queued on the device: its sampled tokens there (`[padded rows, steps]`) and, on CUDA, their
    copy to pinned host memory, under way. `wait_for_device` waits for a CUDA event (the model runner's:
    with tensor parallelism it also watches the other ranks)."""

    def __init__(
        self, batch: ScheduledBatch, tokens: torch.Tensor, wait_for_device: Callable[[torch.cuda.Event], None]
    ):
        self.batch, self._host, self._copied = batch, tokens, None
        self._wait_for_device = wait_for_device
        if tokens.is_cuda:
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()

    def sampled_tokens(self) -> list[list[int]]:
        """For each of `batch.sampled_seqs`, its tokens (waits for their copy only, not for work launched
        after it)."""
        if self._copied is not None:
            self._wait_for_device(self._copied)
        return self._host[: len(self.batch.sampled_seqs)].tolist()
