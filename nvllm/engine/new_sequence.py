"""A request as the scheduler takes it: one Sequence, its further samples (`n`) as its forks."""

from __future__ import annotations

import dataclasses

from nvllm.engine.request_outputs import attach_detokenizer
from nvllm.sampling_params import MAX_SEED, SamplingParams
from nvllm.scheduler.sequence import Sequence


def _fork_seed(seed: int | None, index: int) -> int | None:
    return None if seed is None else (seed + index) % MAX_SEED


def new_sequence(token_ids: list[int], params: SamplingParams, priority: int, tokenizer) -> Sequence:
    # sample i draws from seed + i (as vLLM does): reproducible, and distinct from the others; the prompt's
    # log-probabilities are the first sample's, computed once
    forks = [
        Sequence(
            token_ids,
            dataclasses.replace(params, n=1, seed=_fork_seed(params.seed, i), prompt_logprobs=None),
            priority,
        )
        for i in range(1, params.n)
    ]
    for fork in forks:  # derived at submission, which `replace` does not copy
        fork.sampling_params.bad_words_token_ids = params.bad_words_token_ids
    seq = Sequence(token_ids, params, priority, forks)
    for member in (seq, *seq.forks):
        if params.stop_strings:
            attach_detokenizer(member, tokenizer)
    return seq
