"""Shared by the engine-core tests: a cheap tiny engine, random token prompts, a spy on scheduled batches."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

import torch

from nvllm import LLM
from nvllm.tokenizer import load_tokenizer

# On a CPU shared with other jobs, OpenMP's spinning threads slow the small matmuls of the tiny model by
# two orders of magnitude; one thread is as fast as two on an idle machine at these sizes.
torch.set_num_threads(1)

# The tiny preset with a smaller vocabulary: the LM head over Qwen's 152k tokens dominates a CPU step and
# its random weights dominate engine start-up. Prompts are token ids below this.
TINY_VOCAB_SIZE = 4096


# Loading Qwen's tokenizer takes seconds, more than the rest of a tiny engine's start-up; the engines these
# tests build share one (the engine never changes its tokenizer).
shared_tokenizer = functools.cache(load_tokenizer)


def tiny_llm(**overrides) -> LLM:
    with mock.patch("nvllm.engine.llm_engine.load_tokenizer", shared_tokenizer):
        return LLM("tiny", enforce_eager=True, model__vocab_size=TINY_VOCAB_SIZE, **overrides)


def random_prompt(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(TINY_VOCAB_SIZE) for _ in range(length)]


@dataclass
class ScheduledStep:
    is_prefill: bool
    prompts: list[tuple[int, ...]]  # each scheduled sequence's prompt, which identifies the request
    num_new_tokens: list[int]
    num_uncomputed_tokens: list[int]  # before the step


@contextmanager
def recorded_steps(llm: LLM) -> Iterator[list[ScheduledStep]]:
    """Every batch the scheduler hands out while the block runs, as it was when scheduled."""
    steps: list[ScheduledStep] = []
    scheduler = llm.scheduler
    schedule = scheduler.schedule

    def spy():
        batch = schedule()
        steps.append(ScheduledStep(
            is_prefill=batch.is_prefill,
            prompts=[tuple(seq.token_ids[: seq.num_prompt_tokens]) for seq in batch.seqs],
            num_new_tokens=list(batch.num_new_tokens),
            num_uncomputed_tokens=[seq.num_uncomputed_tokens for seq in batch.seqs],
        ))
        return batch

    scheduler.schedule = spy
    try:
        yield steps
    finally:
        del scheduler.schedule
