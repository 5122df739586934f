"""A batch queued on the device, and the copies of its sampled tokens (and log-probabilities) to the host,
each step's made as that step's sampling ends."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvllm.runner.contract import Sample
from nvllm.sampling.logits_processors import Logprobs
from nvllm.sampling.prompt_logprobs import PromptLogprobs
from nvllm.scheduler.scheduler import ScheduledBatch


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of `tensor` under way (pinned memory on CUDA, so that it does not wait for later work)."""
    if not tensor.is_cuda:
        return tensor
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


class SampledSteps:
    """The host copies of a batch's steps, one a step, each queued right after the step's sampling (by the
    runner's sampling, `recording`), so that the host can read a decode round's first steps while its later
    ones still run: a step's sampled tokens `[logits rows]`, its log-probabilities where requests asked
    (`Logprobs`, which the sampler fills step by step), and on CUDA an event that the copies are done."""

    def __init__(self, logprobs: Logprobs | None = None):
        self.logprobs = logprobs
        self.tokens: list[torch.Tensor] = []
        self.step_logprobs: list[tuple[torch.Tensor, ...]] = []  # each step's (top values, top ids, sampled)
        self.copied: list[torch.cuda.Event | None] = []

    def recording(self, sample: Sample) -> Sample:
        """`sample`, each step's results copied to the host as soon as they are sampled."""

        def sample_and_copy(logits: torch.Tensor, step: int) -> torch.Tensor:
            tokens = sample(logits, step)
            self.add(tokens)
            return tokens

        return sample_and_copy

    def add(self, tokens: torch.Tensor) -> None:
        """The next step's tokens, and its log-probabilities once the sampler has recorded them."""
        step = len(self.tokens)
        self.tokens.append(to_host(tokens))
        if self.logprobs is not None:
            self.step_logprobs.append(tuple(map(to_host, self.logprobs.steps[step])))
        event = None
        if tokens.is_cuda:
            event = torch.cuda.Event()
            event.record()
        self.copied.append(event)


class LaunchedBatch:
    """A batch queued on the device, its steps' host copies under way (`SampledSteps`); `wait_for_device`
    waits for a CUDA event (the model runner's: with tensor parallelism it also watches the other ranks).
    The engine takes a decode round's tokens step by step or all at once (`take_tokens`)."""

    def __init__(
        self,
        batch: ScheduledBatch,
        sampled: SampledSteps,
        wait_for_device: Callable[[torch.cuda.Event], None],
        num_logprobs: list[int | None] | None = None,
        prompt_logprobs: PromptLogprobs | None = None,
    ):
        self.batch, self.sampled = batch, sampled
        self._wait_for_device = wait_for_device
        self.num_sampled = len(batch.sampled_seqs)  # counted now: a prompt's forks leave it in `postprocess`
        self.steps_taken = 0  # the steps whose tokens the engine took (`take_tokens`)
        self._num_logprobs = num_logprobs
        self._prompt_logprobs = prompt_logprobs
        if prompt_logprobs is not None:
            self._prompt_values = to_host(prompt_logprobs.values)
            self._prompt_top_ids = to_host(prompt_logprobs.top_ids)
            self._prompt_copied = torch.cuda.Event() if prompt_logprobs.values.is_cuda else None
            if self._prompt_copied is not None:
                self._prompt_copied.record()

    @property
    def num_steps(self) -> int:
        return self.batch.num_steps

    @property
    def all_taken(self) -> bool:
        return self.steps_taken == self.num_steps

    def take_tokens(self, num_steps: int) -> tuple[list[list[int]], list[list[dict[int, float]]] | None]:
        """The next `num_steps` steps' tokens not taken yet, for each of `batch.sampled_seqs` (waiting for
        those steps' copies only, not for work launched after them), and their log-probabilities where
        asked (see `sampled_logprobs`)."""
        start, stop = self.steps_taken, self.steps_taken + num_steps
        if event := self.sampled.copied[stop - 1]:
            self._wait_for_device(event)  # the steps' copies are queued in order: the last one's covers all
        self.steps_taken = stop
        columns = [self.sampled.tokens[step][: self.num_sampled].tolist() for step in range(start, stop)]
        return [list(row) for row in zip(*columns)], self.sampled_logprobs(start, stop)

    def sampled_logprobs(self, start: int, stop: int) -> list[list[dict[int, float]]] | None:
        """For each of `batch.sampled_seqs` that asked for `logprobs=k` (others: empty), per step from
        `start` to `stop`, token id -> log-probability of the sampled token first, then of its top k by rank
        (vLLM's order). Only after those steps' copies are done (`take_tokens`)."""
        if self._num_logprobs is None:
            return None
        result = [[] for _ in self._num_logprobs]
        for step in range(start, stop):
            step_logprobs = self.sampled.step_logprobs[step]
            top_values, top_ids, sampled = (t[: self.num_sampled].tolist() for t in step_logprobs)
            tokens = self.sampled.tokens[step][: self.num_sampled].tolist()
            for row, num_top in enumerate(self._num_logprobs):
                if num_top is None:
                    continue
                entry = {tokens[row]: sampled[row]}
                for top_id, value in zip(top_ids[row][:num_top], top_values[row][:num_top]):
                    entry.setdefault(top_id, value)
                result[row].append(entry)
        return result

    def prompt_logprobs(self) -> list[list[dict[int, float]]] | None:
        """For each of `batch.seqs` (a prefill), the prompt log-probabilities its step computed, position by
        position (empty: none); None when no request of the batch asked."""
        if self._prompt_logprobs is None:
            return None
        if self._prompt_copied is not None:
            self._wait_for_device(self._prompt_copied)
        return self._prompt_logprobs.entries(self._prompt_values.tolist(), self._prompt_top_ids.tolist())
