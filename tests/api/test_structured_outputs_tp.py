"""Structured outputs under tensor parallelism (gloo, CPU): rank 0 masks and samples, and the outputs are
those of one rank."""

from nvllm import LLM, SamplingParams
from tests.helpers.engine_utils import random_prompt

SETTINGS = dict(enforce_eager=True, kvcache_block_size=16, max_model_len=128, num_decode_steps=4)


def test_tp2_serves_structured_outputs_as_tp1():
    prompts = [random_prompt(12, seed) for seed in range(2)]
    params = [
        SamplingParams(
            temperature=1.0, seed=1, max_tokens=40, structured_outputs={"regex": "[0-9]{2}-[a-z]{3}"}
        ),
        SamplingParams(
            temperature=1.0, seed=2, max_tokens=40, n=2, structured_outputs={"choice": ["up", "down"]}
        ),
    ]
    with LLM("tiny", **SETTINGS) as llm:
        expected = llm.generate(prompts, params, use_tqdm=False)
    with LLM("tiny", tensor_parallel_size=2, **SETTINGS) as llm:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    assert [[c.token_ids for c in o.outputs] for o in outputs] == [
        [c.token_ids for c in o.outputs] for o in expected
    ]
    assert [c.text in ("up", "down") for c in outputs[1].outputs] == [True, True]
