"""The request API under tensor parallelism (gloo, CPU): forks' block copies reach every rank, and rank 0's
penalties, min_tokens, log-probabilities and stop strings give what one rank gives."""

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

SETTINGS = dict(kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128, num_decode_steps=4)


def test_tp2_serves_the_request_api_as_tp1():
    prompts = [random_prompt(21, seed) for seed in range(2)]
    params = [
        SamplingParams(temperature=1.0, seed=3, max_tokens=30, n=3, logprobs=2, repetition_penalty=0.5),
        SamplingParams(temperature=0, max_tokens=30, stop=" the", min_tokens=4, presence_penalty=-1.5),
    ]
    with tiny_llm(**SETTINGS) as llm:
        expected = llm.generate(prompts, params, use_tqdm=False)
    with tiny_llm(tensor_parallel_size=2, **SETTINGS) as llm:
        outputs = llm.generate(prompts, params, use_tqdm=False)

    def without_logprobs(outs):
        return [[(c.token_ids, c.text, c.finish_reason, c.stop_reason) for c in o.outputs] for o in outs]

    assert without_logprobs(outputs) == without_logprobs(expected)
    assert len({tuple(c.token_ids) for c in outputs[0].outputs}) == 3
    for completion, reference in zip(outputs[0].outputs, expected[0].outputs):
        for entry, expected_entry in zip(completion.logprobs, reference.logprobs):  # sharded sums: fp32 noise
            assert entry == pytest.approx(expected_entry, abs=1e-5)
