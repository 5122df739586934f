"""Start-up's prefill warm-up (`nvllm.runner.prefill_warm_up`): the step sizes it runs, and that running them
through a runner leaves the engine as it was. Its effect on the GPU (no Triton compile in later prefill
steps) is `tests/runner/test_prefill_warm_up_gpu.py`'s."""

from __future__ import annotations

import pytest
import torch

from nvllm import SamplingParams
from nvllm.runner.prefill_warm_up import prefill_warm_up_tokens
from tests.helpers.engine_utils import random_prompt, tiny_llm


@pytest.mark.parametrize(
    "budget, tokens",
    [
        # each ladder count up to the step's budget, then the budget itself; each also a token shorter
        (16384, [7, 8, 31, 32, 127, 128, 511, 512, 2047, 2048, 8191, 8192, 16383, 16384]),
        (1000, [7, 8, 31, 32, 127, 128, 511, 512, 999, 1000]),
        (128, [7, 8, 31, 32, 127, 128]),
        (40000, [7, 8, 31, 32, 127, 128, 511, 512, 2047, 2048, 8191, 8192, 32767, 32768]),
        (5, [4, 5]),
    ],
)
def test_the_warm_up_takes_each_ladder_count_and_one_less_within_a_steps_budget(budget, tokens):
    assert prefill_warm_up_tokens(budget) == tokens


def test_the_warm_up_runs_a_prefill_of_each_count_through_the_model_and_leaves_the_engine_as_it_was():
    settings = dict(
        kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128, max_num_batched_tokens=600
    )
    greedy = SamplingParams(temperature=0, max_tokens=6)
    prompt = random_prompt(37, 0)
    with tiny_llm(**settings) as llm:
        runner = llm.model_runner
        layers = runner._attention_layers(runner.model)
        expected = llm.generate([prompt], greedy, use_tqdm=False)[0]["token_ids"]
        kv_before = [(layer.k_cache.clone(), layer.v_cache.clone()) for layer in layers]
        compile_s = runner.timings["compile_s"]
        step_tokens = []
        hook = runner.model.register_forward_pre_hook(lambda _, args: step_tokens.append(args[0].shape[0]))
        try:
            runner.warm_up_prefill()
        finally:
            hook.remove()
        assert step_tokens == prefill_warm_up_tokens(600)
        assert runner.timings["compile_s"] > compile_s  # its time is start-up's compile time
        # no KV written: the prefix cache's blocks (the prompt's) still hold what they held
        for (k_before, v_before), layer in zip(kv_before, layers):
            assert torch.equal(layer.k_cache, k_before) and torch.equal(layer.v_cache, v_before)
        assert llm.generate([prompt], greedy, use_tqdm=False)[0]["token_ids"] == expected
        assert llm.stats()["prefix_cache_hit_tokens"] > 0  # the second prompt was served from those blocks
