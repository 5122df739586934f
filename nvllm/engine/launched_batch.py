"""A batch queued on the device, and the copy of its sampled tokens to the host."""

from __future__ import annotations

import torch

from nvllm.engine.scheduler import ScheduledBatch


class LaunchedBatch:
    """A batch queued on the device: its sampled tokens there (`[padded rows, steps]`) and, on CUDA, their
    copy to pinned host memory, under way."""

    def __init__(self, batch: ScheduledBatch, tokens: torch.Tensor):
        self.batch, self._host, self._copied = batch, tokens, None
        if tokens.is_cuda:
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()

    def sampled_tokens(self) -> list[list[int]]:
        """For each of `batch.sampled_seqs`, its tokens (waits for their copy only, not for work launched
        after it)."""
        if self._copied is not None:
            self._copied.synchronize()
        return self._host[: len(self.batch.sampled_seqs)].tolist()
