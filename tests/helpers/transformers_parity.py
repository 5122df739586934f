"""The CPU oracle of a family checkpoint: the engine's greedy tokens and top-k log-probabilities against
transformers' model of the same checkpoint in fp32, through chunked prefill and a prefix-cache hit."""

from __future__ import annotations

import torch

from nvllm import LLM, SamplingParams
from tests.helpers.family_checkpoints import load_family_model

SHARED_PREFIX = list(range(500, 524))  # 6 blocks of 4: the second request finds them cached
PROMPTS = [
    list(range(1000, 1040)),  # 40 tokens through a 16-token budget: three chunks
    SHARED_PREFIX + [7, 8, 9],
    [9707, 11, 1879, 0],
    SHARED_PREFIX + [3000, 3001],
]
NUM_TOKENS, TOP_K = 8, 5


def engine(path, **overrides) -> LLM:
    settings = dict(
        enforce_eager=True,
        kvcache_block_size=4,
        num_kvcache_blocks=128,
        max_num_batched_tokens=16,
        max_model_len=64,
    )
    return LLM(str(path), **{**settings, **overrides})


def assert_greedy_equals_transformers(path, **overrides) -> None:
    """Each of PROMPTS generated one at a time (the last one after its prefix was cached): the greedy
    tokens are transformers', their top-k log-probabilities within fp32 rounding of its."""
    hf_model = load_family_model(path)
    params = SamplingParams(max_tokens=NUM_TOKENS, temperature=0, ignore_eos=True, logprobs=TOP_K)
    with engine(path, **overrides) as llm:
        outputs = [llm.generate([prompt], params, use_tqdm=False)[0] for prompt in PROMPTS]
        assert llm.block_manager.num_hit_tokens >= len(SHARED_PREFIX)  # the last prompt's prefix was cached
    for prompt, output in zip(PROMPTS, outputs):
        sample = output.outputs[0]
        with torch.no_grad():
            logits = hf_model(torch.tensor([prompt + sample.token_ids])).logits[0, len(prompt) - 1 : -1]
        expected = logits.argmax(-1).tolist()
        assert sample.token_ids == expected
        reference = torch.log_softmax(logits, -1)
        for step, token_logprobs in enumerate(sample.logprobs):
            top = reference[step].topk(TOP_K)
            ours = torch.tensor([token_logprobs[token] for token in top.indices.tolist()])
            torch.testing.assert_close(ours, top.values, atol=2e-4, rtol=1e-4)
