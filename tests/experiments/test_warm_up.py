"""The harness's warm-up: what it runs before a runner's measured part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.harness.engine import warm_up


class RecordingLLM:
    """Records the prompts of each `generate` call."""

    def __init__(self, device: str, budget: int, max_model_len: int, kv_blocks: int = 1000):
        scheduler = SimpleNamespace(max_num_batched_tokens=budget, max_model_len=max_model_len)
        cache = SimpleNamespace(block_size=256)
        self.config = SimpleNamespace(device=device, scheduler=scheduler, cache=cache)
        self.kv_blocks = kv_blocks
        self.calls = []

    def stats(self):
        return {"num_kv_blocks": self.kv_blocks}

    def generate(self, prompts, params, use_tqdm):
        self.calls.append((prompts, params.max_tokens))


@pytest.mark.parametrize(
    "budget, max_model_len, kv_blocks, lengths",
    [
        # every length up to the step's budget, then the budget itself; each also a token shorter (Triton
        # compiles a kernel again for a count that is not a multiple of 16)
        (1024, 4096, 1000, [7, 8, 31, 32, 127, 128, 511, 512, 1023, 1024]),
        # a prompt and its two output tokens within max_model_len
        (16384, 300, 1000, [7, 8, 31, 32, 127, 128, 297, 298]),
        (16384, 4096, 1000, [7, 8, 31, 32, 127, 128, 511, 512, 2047, 2048, 4093, 4094]),
        # ... and within the KV cache (2 blocks of 256 tokens)
        (16384, 4096, 2, [7, 8, 31, 32, 127, 128, 509, 510]),
        # no room for a prompt beside its output tokens: the short request alone
        (16384, 2, 1000, []),
    ],
)
def test_on_a_gpu_the_warm_up_prefills_a_prompt_of_each_length_up_to_a_steps_budget(
    budget, max_model_len, kv_blocks, lengths
):
    llm = RecordingLLM("cuda:0", budget, max_model_len, kv_blocks)
    warm_up(llm)
    prompts = [prompts for prompts, _ in llm.calls]
    assert prompts[0] == [[0] * 8]  # the short request first
    assert [len(p[0]) for p in prompts[1:]] == lengths
    # one prompt a call, each of its own token (no prompt finds another's prefix cached)
    assert all(len(p) == 1 for p in prompts)
    assert len({p[0][0] for p in prompts}) == len(prompts)
    assert all(max_tokens == 2 for _, max_tokens in llm.calls)


def test_on_the_cpu_the_warm_up_is_one_short_request():
    llm = RecordingLLM("cpu", 16384, 4096)
    warm_up(llm)
    assert [prompts for prompts, _ in llm.calls] == [[[0] * 8]]
