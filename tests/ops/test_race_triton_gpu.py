"""The race kernels on the GPU, at Qwen3's vocabulary: greedy rows against torch's argmax at every chunking,
a row's draws against softmax(logits / T) whether a row is one chunk or many, and the engine's greedy rows of
a mixed batch the same with `compile.race_kernel` as without.
`python -m pytest -m gpu tests/ops/test_race_triton_gpu.py`."""

import pytest
import torch

pytestmark = pytest.mark.gpu

VOCAB = 151_936


@pytest.mark.parametrize("num_rows", [1, 2, 9, 64, 256, 512])
def test_greedy_rows_take_the_first_largest_logit(num_rows):
    from nvllm.ops.race_triton import race_in_kernels

    generator = torch.Generator().manual_seed(num_rows)
    logits = torch.randn(num_rows, VOCAB, generator=generator).to(torch.bfloat16)
    logits[0, [VOCAB - 1, 70_000, 100]] = 9.0  # ties far apart: the first wins
    logits = logits.cuda()
    ones = torch.ones(num_rows, device="cuda")
    tokens = race_in_kernels(logits, ones, torch.zeros(num_rows, device="cuda"), seed=num_rows)
    assert tokens[0].item() == 100
    assert torch.equal(tokens, logits.float().argmax(-1))


@pytest.mark.parametrize("num_rows, calls", [(16_384, 1), (1, 4_000)])
def test_draws_follow_softmax_of_the_temperature(num_rows, calls):
    """Many rows in one call (a chunk a row), or one row (many chunks) in many calls under their seeds."""
    from nvllm.ops.race_triton import race_chunks, race_in_kernels
    from tests.helpers.sampled_frequencies import assert_follows

    row_logits = torch.full((VOCAB,), float("-inf"))
    row_logits[[5, 40_000, 77_777, 120_001, VOCAB - 1]] = torch.tensor([0.0, 0.7, -0.4, -1.5, 1.2])
    logits = row_logits.to(torch.bfloat16).repeat(num_rows, 1).cuda()
    inv_temperature = 1 / 0.7
    inv_temperatures = torch.full((num_rows,), inv_temperature, device="cuda")
    tokens = torch.cat(
        [
            race_in_kernels(logits, inv_temperatures, torch.ones(num_rows, device="cuda"), seed=seed)
            for seed in range(calls)
        ]
    )
    assert (race_chunks(num_rows, VOCAB)[1] > 1) == (num_rows == 1)
    probs = torch.softmax(row_logits.to(torch.bfloat16).double() * inv_temperature, -1).tolist()
    assert_follows(tokens, probs, deviations=4.5)


def test_engine_greedy_rows_are_the_same_with_the_race_kernels():
    from nvllm import LLM, SamplingParams

    prompts = [[(17 * i + j) % 1000 + 10 for j in range(8 + 5 * i)] for i in range(6)]
    params = [SamplingParams(temperature=(i % 2) * 0.8, max_tokens=24, ignore_eos=True) for i in range(6)]
    outputs = {}
    for race_kernel in (False, True):
        settings = dict(enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=256)
        with LLM("qwen3-0.6b", compile__race_kernel=race_kernel, **settings) as llm:
            outputs[race_kernel] = llm.generate(prompts, params, use_tqdm=False)
            assert llm.model_runner.sampler.race_kernel == race_kernel
    for i in range(0, 6, 2):  # the greedy rows
        assert outputs[True][i]["token_ids"] == outputs[False][i]["token_ids"]
    for i in range(1, 6, 2):
        assert len(outputs[True][i]["token_ids"]) == 24
