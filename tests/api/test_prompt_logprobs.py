"""`SamplingParams(prompt_logprobs=k)` against transformers' log-softmax over the prompt (fp32, CPU): the
prompt token's log-probability and the top k at every position after the first, whether the prompt is
computed in one step, in chunks, or after a prefix-cache hit."""

import pytest
import torch
from transformers import Qwen3ForCausalLM

from nvllm import LLM, SamplingParams
from tests.helpers.transformers_parity import engine as parity_engine

PROMPTS = [list(range(1000, 1023)), [9707, 11, 1879, 0, 42, 42, 7, 3000, 151645, 198, 5]]
NUM_TOP = 3
TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    return Qwen3ForCausalLM.from_pretrained(str(tiny_checkpoint), dtype=torch.float32).eval()


def expected_logprobs(hf_model, prompt: list[int]) -> torch.Tensor:
    """[positions, vocab]: row p is the distribution of token p + 1."""
    with torch.no_grad():
        return hf_model(torch.tensor([prompt])).logits[0].float().log_softmax(-1)


def engine(checkpoint, **overrides) -> LLM:
    """The parity tests' engine (eager fp32, blocks of 4), with room for a few prompts in one step."""
    return parity_engine(checkpoint, **{"num_kvcache_blocks": 256, "max_num_batched_tokens": 64, **overrides})


def assert_matches(prompt_logprobs, prompt: list[int], expected: torch.Tensor, num_top: int) -> None:
    assert len(prompt_logprobs) == len(prompt) and prompt_logprobs[0] is None
    for position in range(1, len(prompt)):
        entry, row = prompt_logprobs[position], expected[position - 1]
        token = prompt[position]
        assert next(iter(entry)) == token  # the prompt token first, then the top k
        top_values, top_ids = row.topk(num_top)
        assert set(entry) == {token, *top_ids.tolist()}
        for token_id, value in entry.items():
            assert abs(value - row[token_id].item()) < TOLERANCE, (position, token_id)
        assert list(entry.values())[-num_top:] == sorted(list(entry.values())[-num_top:], reverse=True)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"max_num_batched_tokens": 8},  # chunked prefill: each chunk's positions
        {"tensor_parallel_size": 2},
    ],
    ids=["one-step", "chunked", "tp2"],
)
def test_prompt_logprobs_equal_transformers(tiny_checkpoint, hf_model, overrides):
    params = SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=NUM_TOP)
    with engine(tiny_checkpoint, **overrides) as llm:
        outputs = llm.generate(PROMPTS, params, use_tqdm=False)
        plain = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    for prompt, out, without in zip(PROMPTS, outputs, plain):
        assert_matches(out.prompt_logprobs, prompt, expected_logprobs(hf_model, prompt), NUM_TOP)
        assert out.outputs == without.outputs and without.prompt_logprobs is None  # sampling unchanged


def test_prefix_cache_hit_still_gives_every_position(tiny_checkpoint, hf_model):
    """The same prompt twice: the second finds its blocks cached, and its prompt's positions are computed
    again for their logits; a request without prompt_logprobs still hits the cache."""
    prompt = PROMPTS[0]
    expected = expected_logprobs(hf_model, prompt)
    with engine(tiny_checkpoint) as llm:
        first = llm.generate([prompt], SamplingParams(max_tokens=2), use_tqdm=False)[0]
        second, third = (
            llm.generate([prompt], SamplingParams(max_tokens=2, prompt_logprobs=k), use_tqdm=False)[0]
            for k in (1, None)
        )
    assert first.num_cached_tokens == 0 and third.num_cached_tokens > 0
    assert second.num_cached_tokens == 0
    assert_matches(second.prompt_logprobs, prompt, expected, 1)


def test_n_samples_share_one_prompt_computation(tiny_checkpoint, hf_model):
    prompt = PROMPTS[1]
    params = SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=4, prompt_logprobs=0)
    with engine(tiny_checkpoint) as llm:
        (out,) = llm.generate([prompt], params, use_tqdm=False)
        assert llm.stats()["prefill_tokens"] == len(prompt)
    assert len(out.outputs) == 3
    assert_matches(out.prompt_logprobs, prompt, expected_logprobs(hf_model, prompt), 0)


def test_prompt_logprobs_respect_max_logprobs(tiny_checkpoint):
    with engine(tiny_checkpoint, max_logprobs=2) as llm:
        with pytest.raises(ValueError, match="prompt_logprobs=3 asks for more"):
            llm.generate([PROMPTS[0]], SamplingParams(prompt_logprobs=3), use_tqdm=False)
        assert llm.generate([PROMPTS[0]], SamplingParams(prompt_logprobs=2, max_tokens=1), use_tqdm=False)
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=-2)


def test_a_prompt_preempted_between_chunks_resumes_its_prompt_logprobs(tiny_checkpoint, hf_model):
    """Preempted after its first chunk, the request is admitted again: the blocks of positions already
    recorded come from the prefix cache, the others are computed again, and each position is recorded
    once."""
    prompt = PROMPTS[0]
    with engine(tiny_checkpoint, max_num_batched_tokens=10) as llm:
        seq = llm.add_request(prompt, SamplingParams(max_tokens=2, prompt_logprobs=1))
        llm.step()
        assert seq.computed_len == 10 and len(seq.prompt_logprobs) == 11
        llm.scheduler.lifecycle.preempt(seq)
        while not llm.is_finished():
            llm.step()
        assert seq.cached_len == 8  # the two full blocks before position 10
    assert_matches(seq.prompt_logprobs, prompt, expected_logprobs(hf_model, prompt), 1)
