"""Prompts under shared prefixes: a system prompt or few-shot header over many requests, n samples of one
prompt. Drawn as the peer comparison's `prefix` workload draws them (Python's `random`, seeded: every
prefix's tokens, then each request's suffix length and tokens, prefix by prefix), so that both engines run
the very same requests for the same settings."""

from __future__ import annotations

import random

from experiments.harness.config import WorkloadConfig


def shared_prefix_prompts(workload: WorkloadConfig, rng: random.Random, max_token_id: int) -> list[list[int]]:
    """`workload.num_seqs` prompts: `num_prefixes` prefixes of `prefix_len` tokens, each shared by
    `num_seqs / num_prefixes` requests with a suffix of min_input_len..input_len tokens."""
    per_prefix = workload.num_seqs // workload.num_prefixes
    shortest = workload.input_len if workload.min_input_len is None else workload.min_input_len
    prefixes = [
        [rng.randint(0, max_token_id) for _ in range(workload.prefix_len)]
        for _ in range(workload.num_prefixes)
    ]
    by_prefix = [
        [
            prefix + [rng.randint(0, max_token_id) for _ in range(rng.randint(shortest, workload.input_len))]
            for _ in range(per_prefix)
        ]
        for prefix in prefixes
    ]
    if workload.interleave_prefixes:
        return [group[i] for i in range(per_prefix) for group in by_prefix]
    return [prompt for group in by_prefix for prompt in group]
