"""`n` samples of one prompt: computed once, its KV blocks shared (the last one copied on write), each sample
reproducible and its own."""

import dataclasses

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import random_prompt, tiny_llm

BLOCK_SIZE = 16
PROMPT = random_prompt(40, seed=1)  # two full blocks and a partial one, which each sample copies


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=BLOCK_SIZE, num_decode_steps=4, enable_prefix_caching=False) as engine:
        yield engine


def test_greedy_samples_are_identical_and_equal_one_request(llm):
    greedy = SamplingParams(temperature=0, max_tokens=20)
    (single,) = llm.generate([PROMPT], greedy, use_tqdm=False)
    (out,) = llm.generate([PROMPT], dataclasses.replace(greedy, n=3), use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    # the copied last block holds the prompt's K/V: a wrong copy would change the samples' tokens
    assert all(c.token_ids == single["token_ids"] for c in out.outputs)


def test_seeded_samples_are_reproducible_and_each_its_own(llm):
    params = SamplingParams(temperature=1.0, seed=11, max_tokens=16, n=3)
    (first,) = llm.generate([PROMPT], params, use_tqdm=False)
    (again,) = llm.generate([PROMPT], params, use_tqdm=False)
    assert first == again
    samples = [c.token_ids for c in first.outputs]
    assert len({tuple(s) for s in samples}) == 3
    # sample i draws as a request seeded seed + i does
    for index, sample in enumerate(samples):
        alone = dataclasses.replace(params, n=1, seed=params.seed + index)
        assert llm.generate([PROMPT], alone, use_tqdm=False)[0]["token_ids"] == sample


def test_the_prompt_is_prefilled_once_and_its_blocks_are_shared(llm):
    before = llm.stats()["prefill_tokens"]
    seq = llm.add_request(PROMPT, SamplingParams(temperature=1.0, seed=2, max_tokens=8, n=4))
    forks = list(seq.forks)
    llm.step()  # the prompt's prefill, which samples every fork's first token too
    assert llm.stats()["prefill_tokens"] - before == len(PROMPT)
    manager = llm.block_manager
    full = len(PROMPT) // BLOCK_SIZE
    for fork in forks:
        assert fork.block_table[:full] == seq.block_table[:full] and fork.num_completion_tokens == 1
    assert all(manager.blocks[block].ref_count == 4 for block in seq.block_table[:full])
    last_blocks = {s.block_table[full] for s in (seq, *forks)}
    assert len(last_blocks) == 4 and all(manager.blocks[b].ref_count == 1 for b in last_blocks)
    assert llm.scheduler.pending_block_copies == [(seq.block_table[full], f.block_table[full]) for f in forks]
    while not llm.is_finished():
        llm.step()
    assert llm.stats()["prefill_tokens"] - before == len(PROMPT)
    assert manager.num_free_blocks == manager.num_blocks


def test_samples_under_memory_pressure_and_chunked_prompts():
    """Samples preempted and recomputed, and a prompt prefilled in chunks, give the same samples."""
    params = SamplingParams(temperature=1.0, seed=4, max_tokens=40, n=3)
    with tiny_llm(kvcache_block_size=BLOCK_SIZE) as roomy:
        (expected,) = roomy.generate([PROMPT], params, use_tqdm=False)
    with tiny_llm(kvcache_block_size=BLOCK_SIZE, num_kvcache_blocks=9, max_num_batched_tokens=24) as tight:
        (out,) = tight.generate([PROMPT], params, use_tqdm=False)
        assert tight.stats()["num_preemptions"] > 0
    assert out == expected
