"""A batch queued on the device, and the copy of its sampled tokens (and log-probabilities) to the host."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvllm.sampling.logits_processors import Logprobs
from nvllm.sampling.prompt_logprobs import PromptLogprobs
from nvllm.scheduler.scheduler import ScheduledBatch


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of `tensor` under way (pinned memory on CUDA, so that it does not wait for later work)."""
    if not tensor.is_cuda:
        return tensor
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


class LaunchedBatch:
    """A batch queued on the device: its sampled tokens there (`[padded rows, steps]`), their
    log-probabilities where requests asked, and, on CUDA, their copies to pinned host memory, under way.
    `wait_for_device` waits for a CUDA event (the model runner's: with tensor parallelism it also watches the
    other ranks)."""

    def __init__(
        self,
        batch: ScheduledBatch,
        tokens: torch.Tensor,
        wait_for_device: Callable[[torch.cuda.Event], None],
        logprobs: Logprobs | None = None,
        num_logprobs: list[int | None] | None = None,
        prompt_logprobs: PromptLogprobs | None = None,
    ):
        self.batch, self._copied = batch, None
        self._wait_for_device = wait_for_device
        self.num_sampled = len(batch.sampled_seqs)  # counted now: a prompt's forks leave it in `postprocess`
        self._host = to_host(tokens)
        self._logprobs = None if logprobs is None else tuple(map(to_host, logprobs.stacked()))
        self._num_logprobs = num_logprobs
        self._prompt_logprobs = prompt_logprobs
        if prompt_logprobs is not None:
            self._prompt_values = to_host(prompt_logprobs.values)
            self._prompt_top_ids = to_host(prompt_logprobs.top_ids)
        if tokens.is_cuda:
            self._copied = torch.cuda.Event()
            self._copied.record()

    def sampled_tokens(self) -> list[list[int]]:
        """For each of `batch.sampled_seqs`, its tokens (waits for their copy only, not for work launched
        after it)."""
        if self._copied is not None:
            self._wait_for_device(self._copied)
        return self._host[: self.num_sampled].tolist()

    def sampled_logprobs(self) -> list[list[dict[int, float]]] | None:
        """For each of `batch.sampled_seqs` that asked for `logprobs=k` (others: empty), per step, token id ->
        log-probability of the sampled token first, then of its top k by rank (vLLM's order). Call after
        `sampled_tokens`."""
        if self._logprobs is None:
            return None
        top_values, top_ids, sampled = (t[: self.num_sampled].tolist() for t in self._logprobs)
        tokens = self._host[: self.num_sampled].tolist()
        result = []
        for row, num_top in enumerate(self._num_logprobs):
            if num_top is None:
                result.append([])
                continue
            steps = []
            for step, token in enumerate(tokens[row]):
                entry = {token: sampled[row][step]}
                for top_id, value in zip(top_ids[row][step][:num_top], top_values[row][step][:num_top]):
                    entry.setdefault(top_id, value)
                steps.append(entry)
            result.append(steps)
        return result

    def prompt_logprobs(self) -> list[list[dict[int, float]]] | None:
        """For each of `batch.seqs` (a prefill), the prompt log-probabilities its step computed, position by
        position (empty: none); None when no request of the batch asked. Call after `sampled_tokens`."""
        if self._prompt_logprobs is None:
            return None
        return self._prompt_logprobs.entries(self._prompt_values.tolist(), self._prompt_top_ids.tolist())
