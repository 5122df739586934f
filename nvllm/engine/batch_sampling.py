"""How a batch's sampled sequences sample: their params and generators, and the per-request processing
(penalties, bias, logprobs, ...) they ask for, prepared on the device for the model runner."""

from __future__ import annotations

from collections.abc import Callable

import torch

from nvllm.config import ModelConfig
from nvllm.sampling.grammar_masks import grammar_masks
from nvllm.sampling.logits_processors import Logprobs
from nvllm.sampling.prompt_logprobs import prompt_logprobs
from nvllm.sampling.request_processing import request_processing
from nvllm.sampling.sampler import Sampler, SamplingBatch
from nvllm.scheduler.scheduler import ScheduledBatch


def batch_sampling(
    batch: ScheduledBatch,
    num_rows: int,
    model: ModelConfig,
    device: torch.device | str,
    wait_for_device: Callable[[torch.cuda.Event], None] | None = None,
) -> SamplingBatch:
    """`num_rows`: the rows of logits the batch's last step gives (padding rows included);
    `wait_for_device`: the runner's, with which the grammar masks wait for sampled tokens."""
    seqs = batch.sampled_seqs
    num_steps = None if batch.is_prefill else batch.num_new_tokens
    sampling = Sampler.prepare(
        [seq.sampling_params for seq in seqs],
        [seq.generator for seq in seqs],
        device,
        num_rows=num_rows,
        num_steps=num_steps,
    )
    sampling.processing = request_processing(
        seqs, num_steps, model.vocab_size, model.eos_token_ids, device, sampling.inv_temperatures
    )
    if batch.is_prefill:
        sampling.step_prompt_logprobs = prompt_logprobs(
            batch.seqs, batch.num_new_tokens, model.vocab_size, device
        )
    sampling.grammar_masks = grammar_masks(seqs, num_steps, device, wait_for_device)
    return sampling


def requested_logprobs(
    batch: ScheduledBatch, sampling: SamplingBatch, vocab_size: int
) -> tuple[Logprobs | None, list[int | None] | None]:
    """The log-probabilities the device computes for `batch`, and how many top ones each of its sampled
    sequences asked for; (None, None) when none asked."""
    logprobs = None if sampling.processing is None else sampling.processing.logprobs
    if logprobs is None:
        return None, None
    return logprobs, [seq.sampling_params.num_logprobs(vocab_size) for seq in batch.sampled_seqs]
