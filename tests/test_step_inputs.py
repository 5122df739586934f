"""`StepInputBuilder.decode`: a decode round's per-step inputs, against values worked out by hand."""

from nvllm import SamplingParams
from nvllm.engine.scheduler import ScheduledBatch
from nvllm.engine.sequence import Sequence
from nvllm.engine.step_inputs import StepInputBuilder


def decode_round(follows_in_flight: bool = False):
    builder = StepInputBuilder(4, max_model_len=32, max_num_batched_tokens=64, decode_batch_sizes=[2, 4, 8])
    long = Sequence([11, 12, 13, 14, 15, 16], SamplingParams())  # positions 5, 6, 7: block 5 holds 4..7
    short = Sequence([21, 22, 23], SamplingParams())  # one step, then it sits out
    long.block_table, short.block_table = [3, 5], [7]
    batch = ScheduledBatch(is_prefill=False, follows_in_flight=follows_in_flight)
    batch.add(long, 3)
    batch.add(short, 1)
    batch.add(Sequence([31], SamplingParams()), 2)  # a third sequence: the batch pads to 4 rows
    batch.seqs[2].block_table = [9]
    return builder.decode(batch)


def test_decode_round_positions_slots_and_lengths_step_by_step():
    steps = decode_round()
    assert len(steps) == 3 and steps[0].input_ids.tolist() == [16, 23, 31, 0]
    assert all(step.input_ids is None for step in steps[1:])  # sampled on the device by the step before
    assert [step.positions.tolist() for step in steps] == [[5, 2, 0, 0], [6, 2, 1, 0], [7, 2, 1, 0]]
    # block * 4 + offset; -1: a sequence sitting out the step, or a padded row, writes nothing
    assert [step.slot_mapping.tolist() for step in steps] == [
        [21, 30, 36, -1],
        [22, -1, 37, -1],
        [23, -1, -1, -1],
    ]
    assert [step.seqlens_k.tolist() for step in steps] == [[6, 3, 1, 0], [7, 3, 2, 0], [8, 3, 2, 0]]
    assert [step.longest_context for step in steps] == [6, 7, 8]
    assert steps[0].block_tables.tolist()[:3] == [[3, 5] + [0] * 6, [7] + [0] * 7, [9] + [0] * 7]
    assert steps[0].max_seqlen_k == 32  # fixed, so that the batch size alone picks a CUDA graph


def test_a_round_after_one_in_flight_takes_its_first_tokens_on_the_device():
    steps = decode_round(follows_in_flight=True)
    assert all(step.input_ids is None for step in steps)
    assert steps[0].positions.tolist() == [5, 2, 0, 0]
