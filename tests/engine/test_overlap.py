"""Overlapped decode rounds (`scheduler.overlap_rounds`): the next round is planned and launched before the
tokens of the one in flight are known. The oracle is the same engine with rounds run one at a time."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.scheduler import ScheduledBatch
from nvllm.scheduler.sequence import Sequence
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.scheduler.test_scheduler import EOS, bare_scheduler, run_step

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


def test_next_round_drops_what_a_stop_in_the_round_in_flight_makes_useless():
    scheduler = bare_scheduler(num_blocks=8, num_decode_steps=4)
    stops = Sequence([1, 2], SamplingParams(max_tokens=10))
    limited = Sequence([3, 4], SamplingParams(max_tokens=5))  # reaches max_tokens with the first round
    for seq in (stops, limited):
        scheduler.add(seq)
    run_step(scheduler)  # prefill: one token each
    first = scheduler.schedule()
    scheduler.launched(first)
    second = scheduler.schedule_next_round(first)
    assert second.seqs == [stops] and second.num_new_tokens == [4]
    scheduler.launched(second)
    assert stops.device_len == 2 + 1 + 4 + 4 and stops.token_ids == [1, 2, 1]  # 8 tokens only on the device
    assert scheduler.postprocess(first, [[5, EOS, 6, 6], [8, 8, 8, 8]]) == [stops, limited]
    assert stops.completion_token_ids == [1, 5, EOS] and stops.num_in_flight_tokens == 0
    assert limited.completion_token_ids == [1, 8, 8, 8, 8]
    assert scheduler.block_manager.num_free_blocks == 8
    assert scheduler.postprocess(second, [[7, 7, 7, 7]]) == []  # computed for nothing, dropped
    assert stops.completion_token_ids == [1, 5, EOS] and scheduler.num_generated_tokens == 2 + 2 + 4


def test_next_round_is_not_planned_when_the_host_must_decide_first():
    scheduler = bare_scheduler(num_blocks=3, num_decode_steps=4, max_num_seqs=2)
    running = Sequence([1, 2, 3], SamplingParams(max_tokens=30))
    scheduler.add(running)
    run_step(scheduler)  # 4 tokens: one full block
    first = scheduler.schedule()
    scheduler.launched(first)
    scheduler.add(Sequence([5, 6], SamplingParams(max_tokens=4)))
    assert scheduler.schedule_next_round(first) is None  # a prompt to admit: its prefill goes first
    scheduler.waiting.clear()
    second = scheduler.schedule_next_round(first)  # positions 7..10: a third block
    assert second.num_new_tokens == [4] and len(running.block_table) == 3
    scheduler.launched(second)
    third = scheduler.schedule_next_round(second)  # shrunk to the free slots, as rounds one at a time are
    assert third.num_new_tokens == [1]
    scheduler.launched(third)
    # position 12 needs a fourth block: preempting (or waiting for a stop to free one) needs the tokens
    assert scheduler.schedule_next_round(third) is None
