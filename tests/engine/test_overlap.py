"""Overlapped decode rounds (`scheduler.overlap_rounds`): the next round is planned and launched before the
tokens of the one in flight are known. The oracle is the same engine with rounds run one at a time."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.scheduler import ScheduledBatch
from tests.helpers.engine_utils import random_prompt, tiny_llm

PROMPTS = [random_prompt(length, seed=700 + i) for i, length in enumerate([9, 30, 4, 17, 12, 25])]


def engine(overlap_rounds: bool, **overrides):
    return tiny_llm(
        kvcache_block_size=4, max_model_len=96, num_decode_steps=4, overlap_rounds=overlap_rounds, **overrides
    )


@pytest.fixture(scope="module")
def frequent_token():
    """A token the greedy model emits early for the first prompt: used as EOS, it stops sequences at
    various points inside rounds."""
    with engine(overlap_rounds=False) as llm:
        tokens = llm.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    return tokens[0]["token_ids"][5]


def mixed_params():
    return [
        SamplingParams(temperature=0, max_tokens=40),
        SamplingParams(temperature=0.8, seed=11, max_tokens=33),
        SamplingParams(temperature=0, max_tokens=7),
        SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=5, max_tokens=26),
        SamplingParams(temperature=0, max_tokens=1),
    ]


def launches_following(llm) -> list[ScheduledBatch]:
    """Spy: every batch launched while the round before it was still in flight."""
    followed, launch = [], llm.launch

    def spy(batch):
        if not batch.is_prefill and any(seq.num_in_flight_tokens for seq in batch.seqs):
            followed.append(batch)
        return launch(batch)

    llm.launch = spy
    return followed


@pytest.mark.parametrize("num_blocks", [512, 40])  # 40: rounds shrink and sequences get preempted
def test_overlapped_rounds_give_the_tokens_of_rounds_one_at_a_time(frequent_token, num_blocks):
    outputs = {}
    for overlap in (False, True):
        with engine(overlap, model__eos_token_id=frequent_token, num_kvcache_blocks=num_blocks) as llm:
            followed = launches_following(llm)
            outputs[overlap] = llm.generate(PROMPTS, mixed_params(), use_tqdm=False)
            assert bool(followed) == overlap
            assert llm.block_manager.num_free_blocks == num_blocks
            assert not llm.scheduler.running and llm.in_flight is None
    assert outputs[True] == outputs[False]
    stopped_early = [o for o, p in zip(outputs[True], mixed_params()) if len(o["token_ids"]) < p.max_tokens]
    assert any(o["token_ids"][-1] == frequent_token for o in stopped_early)  # EOS stops were exercised
