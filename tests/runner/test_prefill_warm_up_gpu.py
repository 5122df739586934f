"""Start-up's prefill warm-up on the GPU: once an engine has started, a prefill step of any size runs
kernels Triton has compiled, so that no compile lands in a user's first prompts or in a measured run. One
layer of each model's shapes, in the configurations the benchmarks run (Qwen3-30B-A3B with fp8 experts on
fp8 activations and the fp8 cache; bf16; Qwen3-8B in bf16 and in fp8 with the fp8 cache). The cases share
a process, and what one compiled stays compiled for the next: the bench's configuration comes first.
`python -m pytest -m gpu tests/runner/test_prefill_warm_up_gpu.py`."""

from __future__ import annotations

import random

import pytest

from nvllm import LLM, SamplingParams
from nvllm.profiling.kernel_compiles import triton_compiles

pytestmark = pytest.mark.gpu

# Tokens of one prefill step each: odd and even, below and above the prefill graphs' 2,048 tokens and a MoE
# sort by expert's chunks (1,024 tokens at 8 experts a token), and 11,755, the last prefill step of the 30B
# bench's first draw, whose 92 chunks of pairs (not a multiple of 16) had compiled the sort's kernel again.
STEP_TOKENS = (3, 77, 1000, 1500, 2479, 5000, 8200, 11755, 16001)


def prompts_of(total: int, longest: int, rng: random.Random) -> list[list[int]]:
    """Prompts of `total` tokens in all, none longer than `longest`, of random tokens."""
    lengths = [longest] * (total // longest) + ([total % longest] if total % longest else [])
    return [[rng.randrange(1000, 100_000) for _ in range(length)] for length in lengths]


FP8 = dict(quantization="fp8", cache__dtype="fp8")


@pytest.mark.parametrize(
    "model, settings",
    [
        ("qwen3-30b-a3b", {**FP8, "model__fp8_activations": True}),  # the 30B bench's
        ("qwen3-30b-a3b", {}),
        ("qwen3-8b", {}),
        ("qwen3-8b", FP8),
    ],
)
def test_after_start_up_prefill_steps_of_any_size_compile_no_triton_kernel(model, settings):
    settings = dict(model__num_hidden_layers=1, max_num_batched_tokens=16384, max_model_len=4096, **settings)
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    rng = random.Random(0)
    with triton_compiles() as at_start_up:
        llm = LLM(model, **settings)
    assert at_start_up is not None, "this Triton has no compile hook: nothing would be counted"
    with llm:
        with triton_compiles() as compiled:
            for tokens in STEP_TOKENS:
                # one step: the step's budget holds all its prompts
                llm.generate(prompts_of(tokens, 4000, rng), params, use_tqdm=False)
    assert compiled == [], f"compiled after start-up ({len(at_start_up)} in it): {compiled}"
