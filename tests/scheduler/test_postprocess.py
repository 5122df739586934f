"""Postprocessor: sampled tokens appended up to a stop (StopChecker's rules: EOS unless ignored, max_tokens,
max_model_len), the rest of a round discarded, and finished sequences' blocks given back."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.sequence import Sequence
from tests.helpers.scheduler_utils import EOS, bare_scheduler, run_step


def test_decode_round_stops_at_eos_and_max_tokens_and_discards_the_rest():
    scheduler = bare_scheduler(num_blocks=8, num_decode_steps=4)
    eos_mid_round = Sequence([1, 2], SamplingParams(max_tokens=10))
    short = Sequence([3, 4], SamplingParams(max_tokens=3))
    for seq in (eos_mid_round, short):
        scheduler.add(seq)
    run_step(scheduler)  # prefill: one token each
    batch = scheduler.schedule()
    assert not batch.is_prefill and batch.num_new_tokens == [4, 2]  # `short` has 2 tokens left
    assert len(eos_mid_round.block_table) == 2  # KV for positions 2..5: blocks of 4
    scheduler.launched(batch)
    finished = scheduler.postprocess(batch, [[5, EOS, 6, 6], [8, 9, 9, 9]])
    assert finished == [eos_mid_round, short]
    assert eos_mid_round.completion_token_ids == [1, 5, EOS]
    assert short.completion_token_ids == [1, 8, 9]
    assert scheduler.num_generated_tokens == 2 + 2 + 2
    assert scheduler.block_manager.num_free_blocks == 8


def test_eos_finishes_unless_ignored():
    scheduler = bare_scheduler(num_blocks=8)
    stops = Sequence([1, 2], SamplingParams(max_tokens=5))
    ignores = Sequence([1, 2], SamplingParams(max_tokens=5, ignore_eos=True))
    scheduler.add(stops)
    scheduler.add(ignores)
    _, finished = run_step(scheduler, token_id=EOS)
    assert finished == [stops] and stops.completion_token_ids == [EOS]
    assert scheduler.running == [ignores]
    while not scheduler.is_finished():
        run_step(scheduler, token_id=EOS)
    assert ignores.completion_token_ids == [EOS] * 5
    assert scheduler.block_manager.num_free_blocks == 8


# 6 leaves no room for output: the engine refuses such a prompt, and the scheduler holds the limit too
@pytest.mark.parametrize("prompt_len", [4, 5, 6])
def test_max_model_len_stops_generation(prompt_len):
    scheduler = bare_scheduler(num_blocks=8, max_model_len=6)
    seq = Sequence(list(range(1, prompt_len + 1)), SamplingParams(max_tokens=50))
    scheduler.add(seq)
    while not scheduler.is_finished():
        run_step(scheduler)
    assert seq.host_len == 6 and seq.is_finished
