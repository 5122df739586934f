"""`StepInputBuilder`: a decode round's per-step inputs and a prefill step padded for a prefill CUDA graph,
against values worked out by hand."""

import torch

from nvllm import SamplingParams
from nvllm.engine.cuda_graphs import pad_prefill_inputs
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


def test_prefill_inputs_padded_to_a_prefill_graph():
    builder = StepInputBuilder(4, max_model_len=32, max_num_batched_tokens=64, decode_batch_sizes=[2, 4, 8])
    fresh = Sequence([1, 2, 3, 4, 5], SamplingParams())
    cached = Sequence([6, 7, 8, 9, 10, 11], SamplingParams())  # its first block came from the prefix cache
    fresh.block_table, cached.block_table, cached.num_computed_tokens = [2, 3], [4, 5], 4
    batch = ScheduledBatch(is_prefill=True)
    batch.add(fresh, 5)
    batch.add(cached, 2)
    padded = pad_prefill_inputs(builder.prefill(batch), num_tokens=16, width=8)
    assert padded["input_ids"].tolist() == [1, 2, 3, 4, 5, 10, 11] + [0] * 9
    assert padded["positions"].tolist() == [0, 1, 2, 3, 4, 4, 5] + [0] * 9
    assert padded["slot_mapping"].tolist() == [8, 9, 10, 11, 12, 20, 21] + [-1] * 9  # padding writes no KV
    assert padded["cu_seqlens_q"].tolist() == [0, 5, 7, 7, 7]  # two empty sequences
    assert padded["seqlens_k"].tolist() == [5, 6, 0, 0]
    assert padded["block_tables"].tolist() == [[2, 3] + [0] * 6, [4, 5] + [0] * 6, [0] * 8, [0] * 8]
    assert padded["logits_indices"].tolist() == [4, 6, 0, 0]
    assert {name: t.dtype for name, t in padded.items()} == {
        "input_ids": torch.int64,
        "positions": torch.int64,
        "slot_mapping": torch.int64,
        "cu_seqlens_q": torch.int32,
        "seqlens_k": torch.int32,
        "block_tables": torch.int32,
        "logits_indices": torch.int64,
    }


def test_a_prefill_has_as_many_query_rows_as_sequences_only_with_one_query_each():
    """nvllm::attention reads a batch with as many query rows as sequences as one query per sequence (a
    decode kernel may serve it): padding must not make a prefill look like that."""
    builder = StepInputBuilder(4, max_model_len=32, max_num_batched_tokens=64, decode_batch_sizes=[])

    def prefill(*new_tokens: int):
        batch = ScheduledBatch(is_prefill=True)
        for i, num_new in enumerate(new_tokens):
            seq = Sequence(list(range(10 * i, 10 * i + num_new)), SamplingParams())
            seq.block_table = [i]
            batch.add(seq, num_new)
        inputs = builder.prefill(batch)
        return inputs.input_ids.shape[0], inputs.seqlens_k.shape[0]

    assert prefill(2) == (3, 2)  # 2 tokens, 1 sequence padded to 2: one more padded token
    assert prefill(1) == (2, 2)  # one token, padded to 2 with an empty sequence: decode-shaped, rightly
    assert prefill(1, 1, 1) == (3, 3)
    assert prefill(2, 1) == (3, 2)
    assert prefill(1, 2, 1) == (4, 3)
