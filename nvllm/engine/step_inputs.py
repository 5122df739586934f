"""A scheduled batch as the flat tensors the model takes, padded so that compiled graphs see few shapes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from nvllm.engine.scheduler import ScheduledBatch
from nvllm.transfer import to_device

# A decode step's `max_seqlen_q`: an upper bound on its one query per sequence that a compiled graph does
# not specialise on (it would on 1), so that prefill and decode share the graph.
DECODE_MAX_SEQLEN_Q = 2


@dataclass
class StepInputs:
    """A step's model inputs, built on rank 0 (CPU tensors) and sent as they are to the other ranks."""

    input_ids: torch.Tensor | None  # None: a later step of a decode round, fed on the device
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int  # an upper bound, at least 2: a compiled graph would specialise on 1 and compile again
    max_seqlen_k: int
    logits_indices: torch.Tensor  # the rows whose logits are computed (in decode: every row)
    is_prefill: bool
    # the most tokens any sequence attends to (decode's `max_seqlen_k` stays at max_model_len for its graphs)
    longest_context: int

    @property
    def num_logits(self) -> int:
        """Rows of the logits the step returns (padded: at least 2)."""
        return self.logits_indices.shape[0]


def to_device_round(steps: list[StepInputs], device: torch.device | str) -> list[StepInputs]:
    """A decode round's inputs on the device, one copy per field for all its steps (see `to_device`)."""
    per_step = {
        name: to_device(torch.stack([getattr(step, name) for step in steps]), device).unbind(0)
        for name in ("positions", "slot_mapping", "seqlens_k")
    }
    shared = {
        name: to_device(getattr(steps[0], name), device)
        for name in ("cu_seqlens_q", "block_tables", "logits_indices")
    }
    first_input_ids = steps[0].input_ids
    if first_input_ids is not None:
        first_input_ids = to_device(first_input_ids, device)
    return [
        dataclasses.replace(
            step,
            input_ids=first_input_ids if index == 0 else None,
            **{name: rows[index] for name, rows in per_step.items()},
            **shared,
        )
        for index, step in enumerate(steps)
    ]


def capture_sizes(max_batch_size: int) -> list[int]:
    """Decode batch sizes that get a CUDA graph; a batch runs in the smallest one that holds it. Size 1 is
    left out: dynamo specialises on it, which would cost a second compile."""
    sizes = [2, 4, 8] + list(range(16, max_batch_size + 16, 16))
    return sorted({min(size, max(max_batch_size, 2)) for size in sizes})


def padded(values: list[int], size: int, fill: int) -> list[int]:
    return values + [fill] * (size - len(values))


class StepInputBuilder:
    """Builds `StepInputs` on the host. Every size is padded to at least 2 (an empty sequence, a padded
    token): dynamo specialises size-1 dimensions, which would cost another compile."""

    def __init__(
        self, block_size: int, max_model_len: int, max_num_batched_tokens: int, decode_batch_sizes: list[int]
    ):
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        # the block tables' columns: one more (never read) when a sequence fits one block, so as not to
        # compile a graph for width 1 besides the general one
        self.block_table_width = max(2, self.max_blocks_per_seq)
        self.decode_batch_sizes = decode_batch_sizes  # empty: no CUDA graphs, decode batches stay as they are

    def build(self, batch: ScheduledBatch) -> list[StepInputs]:
        """One `StepInputs` per step of the batch: a prefill has one, a decode round `batch.num_steps`."""
        return [self.prefill(batch)] if batch.is_prefill else self.decode(batch)

    def dummy_prefill(self, min_tokens: bool = False) -> StepInputs:
        """Sequences of one block each (all reading block 0), `max_num_batched_tokens` tokens in all."""
        total = 2 * self.block_size if min_tokens else self.max_num_batched_tokens
        lengths = [self.block_size] * (total // self.block_size) + (
            [total % self.block_size] if total % self.block_size else []
        )
        lengths = padded(lengths, 2, 0)
        cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
        return StepInputs(
            input_ids=torch.zeros(total, dtype=torch.int64),
            positions=torch.cat([torch.arange(n) for n in lengths]),
            slot_mapping=torch.full((total,), -1, dtype=torch.int64),
            cu_seqlens_q=torch.tensor(cu_seqlens, dtype=torch.int32),
            seqlens_k=torch.tensor(lengths, dtype=torch.int32),
            block_tables=torch.zeros(len(lengths), 2, dtype=torch.int32),
            max_seqlen_q=max(2, *lengths),
            max_seqlen_k=max(2, *lengths),
            logits_indices=torch.tensor(padded([int(c) - 1 for c in cu_seqlens[1:] if c > 0], 2, 0)),
            is_prefill=True,
            longest_context=max(lengths),
        )

    def dummy_decode(self, batch_size: int) -> StepInputs:
        return StepInputs(
            input_ids=torch.zeros(batch_size, dtype=torch.int64),
            positions=torch.zeros(batch_size, dtype=torch.int64),
            slot_mapping=torch.full((batch_size,), -1, dtype=torch.int64),
            cu_seqlens_q=torch.arange(batch_size + 1, dtype=torch.int32),
            seqlens_k=torch.ones(batch_size, dtype=torch.int32),
            block_tables=torch.zeros(batch_size, self.block_table_width, dtype=torch.int32),
            max_seqlen_q=DECODE_MAX_SEQLEN_Q,
            max_seqlen_k=self.max_model_len,
            logits_indices=torch.arange(batch_size),
            is_prefill=False,
            longest_context=1,
        )

    def _slots(self, block_table: list[int], positions: np.ndarray) -> np.ndarray:
        return np.asarray(block_table, dtype=np.int64)[positions // self.block_size] * self.block_size + (
            positions % self.block_size
        )

    def prefill(self, batch: ScheduledBatch) -> StepInputs:
        """Every size is padded to at least 2 (an empty sequence, a padded token) so that a compiled graph
        never meets a size-1 dimension, which dynamo would specialise and compile again."""
        input_ids, positions, slots, cu_seqlens, seqlens_k, logits_indices = [], [], [], [0], [], []
        for seq, num_new in zip(batch.seqs, batch.num_new_tokens):
            start, end = seq.num_computed_tokens, seq.num_computed_tokens + num_new
            seq_positions = np.arange(start, end)
            input_ids.extend(seq.token_ids[start:end])
            positions.append(seq_positions)
            slots.append(self._slots(seq.block_table, seq_positions))
            cu_seqlens.append(cu_seqlens[-1] + num_new)
            seqlens_k.append(end)
            if end == len(seq):
                logits_indices.append(cu_seqlens[-1] - 1)
        num_tokens = max(len(input_ids), 2)
        num_seqs = max(len(batch.seqs), 2)
        if num_tokens == num_seqs and max(batch.num_new_tokens) > 1:
            num_tokens += 1  # as many query rows as sequences would read as one query each (nvllm::attention)
        width = max(2, max(len(seq.block_table) for seq in batch.seqs))
        block_tables = [padded(seq.block_table, width, 0) for seq in batch.seqs]
        return StepInputs(
            input_ids=torch.tensor(padded(input_ids, num_tokens, 0), dtype=torch.int64),
            positions=torch.tensor(
                padded(np.concatenate(positions).tolist(), num_tokens, 0), dtype=torch.int64
            ),
            slot_mapping=torch.tensor(
                padded(np.concatenate(slots).tolist(), num_tokens, -1), dtype=torch.int64
            ),
            cu_seqlens_q=torch.tensor(padded(cu_seqlens, num_seqs + 1, cu_seqlens[-1]), dtype=torch.int32),
            seqlens_k=torch.tensor(padded(seqlens_k, num_seqs, 0), dtype=torch.int32),
            block_tables=torch.tensor(padded(block_tables, num_seqs, [0] * width), dtype=torch.int32),
            max_seqlen_q=max(2, *batch.num_new_tokens),
            max_seqlen_k=max(2, *seqlens_k),
            logits_indices=torch.tensor(
                padded(logits_indices, max(len(logits_indices), 2), 0), dtype=torch.int64
            ),
            is_prefill=True,
            longest_context=max(seqlens_k),
        )

    def _decode_batch_size(self, num_seqs: int) -> int:
        if not self.decode_batch_sizes or num_seqs > self.decode_batch_sizes[-1]:
            return max(num_seqs, 2)
        return next(size for size in self.decode_batch_sizes if size >= num_seqs)

    def decode(self, batch: ScheduledBatch) -> list[StepInputs]:
        """The steps of a decode round. Step `i` feeds each sequence its token `i` of the round: the last
        one it has for step 0, and for later steps the tokens the previous step samples — on the device,
        so their `input_ids` are left None here for the runner to fill (step 0's too when the round follows
        one still in flight). A sequence with fewer steps than the round sits out the rest: its slot is -1
        (nothing written) and its position stays put.

        Padded to a captured batch size; block tables always `block_table_width` wide and `max_seqlen_k`
        fixed at `max_model_len`, so that only the batch size ever changes a graph."""
        size = self._decode_batch_size(len(batch.seqs))
        num_seqs, num_steps = len(batch.seqs), batch.num_steps
        block_tables = np.zeros((size, self.block_table_width), dtype=np.int32)
        for row, seq in enumerate(batch.seqs):
            block_tables[row, : len(seq.block_table)] = seq.block_table
        # [step, sequence]: a sequence's position advances until its last step, then stays put
        first_positions = np.array([len(seq) - 1 for seq in batch.seqs], dtype=np.int64)
        steps_taken = np.array(batch.num_new_tokens, dtype=np.int64)
        step_index = np.arange(num_steps)[:, None]
        positions = first_positions + np.minimum(step_index, steps_taken - 1)
        blocks = block_tables[np.arange(num_seqs), positions // self.block_size].astype(np.int64)
        slots = np.where(step_index < steps_taken, blocks * self.block_size + positions % self.block_size, -1)

        def padded_steps(values: np.ndarray, fill: int, dtype: torch.dtype) -> torch.Tensor:
            out = np.full((num_steps, size), fill, dtype=np.int64)
            out[:, :num_seqs] = values
            return torch.from_numpy(out).to(dtype)

        all_positions = padded_steps(positions, 0, torch.int64)
        all_slots = padded_steps(slots, -1, torch.int64)
        all_seqlens = padded_steps(positions + 1, 0, torch.int32)
        longest = (positions.max(axis=1) + 1).tolist()
        shared = dict(
            cu_seqlens_q=torch.arange(size + 1, dtype=torch.int32),
            block_tables=torch.from_numpy(block_tables),
            max_seqlen_q=DECODE_MAX_SEQLEN_Q,
            max_seqlen_k=self.max_model_len,
            logits_indices=torch.arange(size),
            is_prefill=False,
        )
        first_input_ids = None  # following a round in flight: its last tokens, which only the device has
        if not batch.follows_in_flight:
            first_input_ids = torch.tensor(padded([seq.last_token for seq in batch.seqs], size, 0))
        return [
            StepInputs(
                input_ids=first_input_ids if step == 0 else None,
                positions=all_positions[step],
                slot_mapping=all_slots[step],
                seqlens_k=all_seqlens[step],
                longest_context=longest[step],
                **shared,
            )
            for step in range(num_steps)
        ]
