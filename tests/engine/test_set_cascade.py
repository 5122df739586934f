"""`set_cascade` switches cascade attention at run time (as the cascade crossover experiment does): off,
decode steps read every sequence's KV in full; on, a shared prefix is read once per step; the tokens stay
the same."""

from __future__ import annotations

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

KV_READS = ("decode_kv_tokens_read", "decode_kv_tokens_read_plain")
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def kv_reads(llm, prompts: list[list[int]]) -> tuple[list[list[int]], int, int]:
    """The greedy tokens of `prompts`, and the KV tokens their decode steps read and would read plainly."""
    before = llm.stats()
    tokens = [output["token_ids"] for output in llm.generate(prompts, GREEDY, use_tqdm=False)]
    after = llm.stats()
    read, plain = (after[key] - before[key] for key in KV_READS)
    return tokens, read, plain


def test_set_cascade_switches_decode_between_cascade_and_plain():
    prefix = random_prompt(24, seed=7)
    prompts = [prefix + random_prompt(3, seed) for seed in range(4)]
    with tiny_llm(kvcache_block_size=4, max_model_len=96, attention__cascade="on") as llm:
        by_cascade, read, plain = kv_reads(llm, prompts)
        assert read < plain
        llm.set_cascade("off")
        assert llm.model_runner.backend.cascade == "off" and llm.config.attention.cascade == "on"
        plain_tokens, read, plain = kv_reads(llm, prompts)
        assert read == plain > 0 and plain_tokens == by_cascade
        llm.set_cascade("on")
        tokens, read, plain = kv_reads(llm, prompts)
        assert read < plain and tokens == by_cascade
        with pytest.raises(ValueError, match="attention.cascade='sometimes' must be auto, on or off"):
            llm.set_cascade("sometimes")
