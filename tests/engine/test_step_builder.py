"""`StepInputBuilder`: a decode round's per-step inputs and a prefill step padded for a prefill CUDA graph,
against values worked out by hand."""

import torch

from nvllm import SamplingParams
from nvllm.attention import TorchBackend
from nvllm.engine.step_builder import StepInputBuilder
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.graph_runner import GraphRunner
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import ScheduledBatch
from nvllm.scheduler.sequence import Sequence

MAX_NUM_SEQS = 6  # token-table rows 0..5, and the scratch row 6


def builder(decode_batch_sizes=(2, 4, 8)) -> StepInputBuilder:
    return StepInputBuilder(
        TorchBackend(4, max_model_len=32),
        BlockManager(16, 4),
        MAX_NUM_SEQS,
        GraphPlan(tuple(decode_batch_sizes)),
    )


def sequence(token_ids: list[int], block_table: list[int], token_row: int) -> Sequence:
    seq = Sequence(token_ids, SamplingParams())
    seq.block_table, seq.token_row = block_table, token_row
    return seq


def decode_round():
    batch = ScheduledBatch(is_prefill=False)
    batch.add(sequence([11, 12, 13, 14, 15, 16], [3, 5], token_row=4), 3)  # positions 5, 6, 7: block 5
    batch.add(sequence([21, 22, 23], [7], token_row=0), 1)  # one step, then it sits out
    batch.add(sequence([31], [9], token_row=2), 2)  # a third sequence: the batch pads to 4 rows
    return builder().decode(batch)


def test_decode_round_positions_slots_and_lengths_step_by_step():
    steps = decode_round()
    assert len(steps) == 3 and all(step.input_ids is None for step in steps)  # read from the token table
    assert [step.token_rows.tolist() for step in steps] == [[4, 0, 2, 6]] * 3  # padding reads the scratch row
    # each step's samples go to the sequence's row while it takes steps, else to the scratch row
    assert [step.sampled_rows.tolist() for step in steps] == [[4, 0, 2, 6], [4, 6, 2, 6], [4, 6, 6, 6]]
    assert [step.positions.tolist() for step in steps] == [[5, 2, 0, 0], [6, 2, 1, 0], [7, 2, 1, 0]]
    # block * 4 + offset; -1: a sequence sitting out the step, or a padded row, writes nothing
    assert [step.slot_mapping.tolist() for step in steps] == [
        [21, 30, 36, -1],
        [22, -1, 37, -1],
        [23, -1, -1, -1],
    ]
    assert [step.seqlens_k.tolist() for step in steps] == [[6, 3, 1, 0], [7, 3, 2, 0], [8, 3, 2, 0]]
    assert steps[0].block_tables.tolist()[:3] == [[3, 5] + [0] * 6, [7] + [0] * 7, [9] + [0] * 7]
    assert steps[0].max_seqlen_k == 32  # fixed, so that the batch size alone picks a CUDA graph


def test_a_round_after_one_in_flight_starts_after_its_tokens():
    batch = ScheduledBatch(is_prefill=False)
    seq = sequence([1, 2, 3], [0, 1], token_row=3)
    seq.num_in_flight_tokens = 4  # the round in flight samples positions 3..6: this one starts at 6
    batch.add(seq, 2)
    steps = builder().decode(batch)
    assert [step.positions.tolist() for step in steps] == [[6, 0], [7, 0]]
    assert [step.slot_mapping.tolist() for step in steps] == [[6, -1], [7, -1]]
    assert steps[0].token_rows.tolist() == [3, 6]


def test_prefill_inputs_padded_to_a_prefill_graph():
    fresh = sequence([1, 2, 3, 4, 5], [2, 3], token_row=1)
    cached = sequence([6, 7, 8, 9, 10, 11], [4, 5], token_row=5)  # its first block was a prefix-cache hit
    cached.computed_len = 4
    batch = ScheduledBatch(is_prefill=True)
    batch.add(fresh, 5)
    batch.add(cached, 2)
    inputs = builder().prefill(batch)
    assert inputs.sampled_rows.tolist() == [1, 5]
    graphs = GraphRunner.__new__(GraphRunner)  # only its padding, no graphs
    graphs.backend = TorchBackend(4, max_model_len=32)
    graphs.plan = GraphPlan((), (16,))
    padded = graphs._pad_prefill(inputs, num_tokens=16)
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
    build = builder(decode_batch_sizes=())

    def prefill(*new_tokens: int):
        batch = ScheduledBatch(is_prefill=True)
        for i, num_new in enumerate(new_tokens):
            batch.add(sequence(list(range(10 * i, 10 * i + num_new)), [i], token_row=i), num_new)
        inputs = build.prefill(batch)
        return inputs.input_ids.shape[0], inputs.seqlens_k.shape[0]

    assert prefill(2) == (3, 2)  # 2 tokens, 1 sequence padded to 2: one more padded token
    assert prefill(1) == (2, 2)  # one token, padded to 2 with an empty sequence: decode-shaped, rightly
    assert prefill(1, 1, 1) == (3, 3)
    assert prefill(2, 1) == (3, 2)
    assert prefill(1, 2, 1) == (4, 3)
