"""An experiment's requests, drawn from its `workload` config: text prompts, or seeded random tokens."""

from __future__ import annotations

import random

from experiments.config import WorkloadConfig
from nvllm.engine.llm_engine import Prompt
from nvllm.sampling_params import SamplingParams

# nano-vLLM's bench draws prompt token ids from [0, 10000]: the same draws make the same workload.
MAX_RANDOM_TOKEN_ID = 10_000


def make_requests(workload: WorkloadConfig, vocab_size: int) -> tuple[list[Prompt], list[SamplingParams]]:
    """`num_seqs` prompts with their sampling params; the same ones for the same seed, whatever the engine.

    Random prompts are drawn exactly as nano-vLLM's bench.py draws them (Python's `random` seeded with
    `workload.seed`: each prompt's length then its token ids, then every output length), so that the
    bench experiment and nano-vLLM's script run the very same requests (133,966 output tokens for seed 0)."""
    rng = random.Random(workload.seed)
    count = workload.num_seqs

    def length(shortest: int | None, longest: int) -> int:
        return longest if shortest is None else rng.randint(shortest, longest)

    if workload.prompts:
        prompts = [workload.prompts[i % len(workload.prompts)] for i in range(count)]
    else:
        max_token_id = min(MAX_RANDOM_TOKEN_ID, vocab_size - 1)
        prompts = [
            [rng.randint(0, max_token_id) for _ in range(length(workload.min_input_len, workload.input_len))]
            for _ in range(count)
        ]
    params = [
        SamplingParams(
            temperature=workload.temperature,
            max_tokens=length(workload.min_output_len, workload.output_len),
            ignore_eos=workload.ignore_eos,
        )
        for _ in range(count)
    ]
    return prompts, params
