"""DecodeRounds: rounds of several steps shrunk to the free blocks, the newest sequence preempted when the
KV cache runs out, and the next round planned while one is in flight (`scheduler.overlap_rounds`)."""

from nvllm import SamplingParams
from nvllm.scheduler.sequence import Sequence, SequenceStatus
from tests.helpers.scheduler_utils import EOS, bare_scheduler, run_step


def test_preemption_takes_the_newest_and_requeues_it_first():
    scheduler = bare_scheduler(num_blocks=3)
    old, new = (Sequence([1, 2, 3, 4], SamplingParams(max_tokens=10)) for _ in range(2))
    waiting = Sequence([5], SamplingParams(max_tokens=10))
    for seq in (old, new, waiting):
        scheduler.add(seq)
    batch, _ = run_step(scheduler)  # both prompts fill one block each; the third is left for `waiting`
    assert batch.seqs == [old, new, waiting]
    batch, _ = run_step(scheduler)  # old and new each need a second block: only one is free
    assert batch.seqs == [old] and not batch.is_prefill
    assert scheduler.num_preemptions == 2  # `waiting` first (newest), then `new`
    assert list(scheduler.waiting) == [new, waiting]
    assert new.status == waiting.status == SequenceStatus.WAITING
    assert new.computed_len == 0 and new.block_table == [] and new.token_ids == [1, 2, 3, 4, 1]
    assert scheduler.block_manager.num_free_blocks == 3 - len(old.block_table)


def test_decode_round_shrinks_to_the_free_blocks():
    scheduler = bare_scheduler(num_blocks=2, num_decode_steps=8)
    seq = Sequence([1, 2, 3], SamplingParams(max_tokens=20))
    scheduler.add(seq)
    run_step(scheduler)  # 4 tokens: block 1 full
    batch, _ = run_step(scheduler)  # positions 3..7 fit the two blocks: a round of 5, not 8
    assert batch.num_new_tokens == [5] and seq.device_len == 9 and scheduler.num_preemptions == 0


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


def test_longest_first_orders_a_rounds_rows_by_length_and_leaves_preemption_to_age():
    """`scheduler.longest_first`: a round's rows (in `schedule` and in the round planned ahead) go by their
    sequences' lengths, the longest first, ties in arrival order; the newest sequence is still the one
    preempted, whatever its place in the round."""
    scheduler = bare_scheduler(num_blocks=16, num_decode_steps=2, longest_first=True)
    lengths = [3, 9, 5, 9, 1]
    seqs = [Sequence([row + 10] * n, SamplingParams(max_tokens=20)) for row, n in enumerate(lengths)]
    for seq in seqs:
        scheduler.add(seq)
    run_step(scheduler)  # every prompt in one prefill, one token each: lengths + 1
    first = scheduler.schedule()
    assert first.seqs == [seqs[1], seqs[3], seqs[2], seqs[0], seqs[4]]
    assert first.num_new_tokens == [2] * 5
    scheduler.launched(first)
    ahead = scheduler.schedule_next_round(first)
    assert ahead.seqs == first.seqs
    scheduler.postprocess(first, [[1, 1]] * 5)
    scheduler.postprocess(ahead, [[1, 1]] * 5)

    # the newest and longest sequence, which would lead the round, is the one preempted for the oldest's block
    crowded = bare_scheduler(num_blocks=3, num_decode_steps=1, longest_first=True)
    old = Sequence([1, 2, 3, 4], SamplingParams(max_tokens=20))  # 5 tokens after its prefill: needs block 2
    new = Sequence([5, 6, 7, 8, 9, 10], SamplingParams(max_tokens=20))  # 7 tokens in its 2 blocks
    for seq in (old, new):
        crowded.add(seq)
    run_step(crowded)
    batch, _ = run_step(crowded)
    assert batch.seqs == [old] and new.status == SequenceStatus.WAITING and crowded.num_preemptions == 1
