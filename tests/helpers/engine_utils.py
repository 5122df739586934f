"""Shared by the engine-core tests: a cheap tiny engine, random token prompts, a spy on scheduled batches."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from nvllm import LLM

# The tiny preset with a smaller vocabulary: the LM head over Qwen's 152k tokens dominates a CPU step and
# its random weights dominate engine start-up. Prompts are token ids below this.
TINY_VOCAB_SIZE = 4096
# The CPU's KV budget for test engines that do not size their cache: the default (cache.cpu_memory_gib, 2 GiB)
# is zeroed at every engine start, per rank, which costs a second or more on a loaded 2-core machine; these
# engines hold a few short sequences, which a small fraction of it serves.
SMALL_CPU_KV_CACHE = {"cache__cpu_memory_gib": 0.25}


def tiny_llm(**overrides) -> LLM:
    return LLM(
        "tiny", enforce_eager=True, model__vocab_size=TINY_VOCAB_SIZE, **{**SMALL_CPU_KV_CACHE, **overrides}
    )


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
        steps.append(
            ScheduledStep(
                is_prefill=batch.is_prefill,
                prompts=[tuple(seq.token_ids[: seq.num_prompt_tokens]) for seq in batch.seqs],
                num_new_tokens=list(batch.num_new_tokens),
                num_uncomputed_tokens=[seq.num_uncomputed_tokens for seq in batch.seqs],
            )
        )
        return batch

    scheduler.schedule = spy
    try:
        yield steps
    finally:
        del scheduler.schedule
