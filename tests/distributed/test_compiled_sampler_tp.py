"""A TP=2 engine whose sampler takes its compiled path (`compile.sampler=on`, the default on CUDA) starts —
the compiled sampler is warmed up with the model's dtype, which the tensor-parallel runner must give — and
generates the greedy tokens of a TP=1 engine with the plain sampler."""

from __future__ import annotations

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

SETTINGS = dict(kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128)
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def test_tp2_engine_with_the_compiled_sampler_starts_and_generates_as_tp1():
    prompts = [random_prompt(9, seed) for seed in range(3)]
    with tiny_llm(**SETTINGS) as llm:
        assert llm.config.compile.sampler == "off"  # auto, on the CPU
        expected = [output["token_ids"] for output in llm.generate(prompts, GREEDY, use_tqdm=False)]
    with tiny_llm(tensor_parallel_size=2, compile__sampler="on", **SETTINGS) as llm:
        assert llm.config.compile.sampler == "on"
        assert llm.startup_timings["compile_s"] > 0  # the sampler's warm-up compile, counted at start-up
        outputs = [output["token_ids"] for output in llm.generate(prompts, GREEDY, use_tqdm=False)]
    assert outputs == expected
