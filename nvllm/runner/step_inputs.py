"""A scheduled batch as the flat tensors the model takes, padded so that compiled graphs see few shapes.

Decode steps never take their tokens from the host: each sequence's newest token lives in the device's
token table (one row per running sequence, the scheduler's `TokenRows`), which the sampler writes after
every step and every decode step gathers from. A round's later steps, and a round launched while the one
before it still runs, need nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from nvllm.attention import AttentionBackend, one_query_per_sequence, padded_size
from nvllm.attention.cascade import CascadePlan, empty_plan
from nvllm.attention.padding import MIN_SIZE
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import ScheduledBatch
from nvllm.transfer import to_device


def token_table_rows(max_num_seqs: int) -> int:
    """Rows of the token table: one per running sequence, and a last, scratch row that padded rows read and
    that rows which sample nothing write."""
    return max_num_seqs + 1


@dataclass
class StepInputs:
    """A step's model inputs, built on rank 0 (CPU tensors) and sent as they are to the other ranks."""

    input_ids: torch.Tensor | None  # prefill's tokens; None in decode (read from the token table)
    token_rows: torch.Tensor | None  # decode: each row's sequence in the token table, whose token it takes
    sampled_rows: torch.Tensor  # per logits row, the token-table row its sampled token goes to
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int  # an upper bound, at least MIN_SIZE
    max_seqlen_k: int
    logits_indices: torch.Tensor  # the rows whose logits are computed (in decode: every row)
    is_prefill: bool
    # decode: the round's prefix groups, where cascade attention serves them (shared by its steps)
    cascade: CascadePlan | None = None
    # a batch's first step: KV blocks to copy before it runs, [copies, 2] (source, destination) rows
    block_copies: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return self.positions.shape[0]

    @property
    def num_seqs(self) -> int:
        return self.seqlens_k.shape[0]

    @property
    def num_logits(self) -> int:
        """Rows of the logits the step returns (padded: at least MIN_SIZE)."""
        return self.logits_indices.shape[0]


PER_STEP_FIELDS = ("positions", "slot_mapping", "seqlens_k", "sampled_rows")  # differ between a round's steps


def to_device_round(steps: list[StepInputs], device: torch.device | str) -> list[StepInputs]:
    """A decode round's inputs on the device, one copy per field for all its steps (see `to_device`)."""
    per_step = {
        name: to_device(torch.stack([getattr(step, name) for step in steps]), device).unbind(0)
        for name in PER_STEP_FIELDS
    }
    shared = {
        name: to_device(getattr(steps[0], name), device)
        for name in ("cu_seqlens_q", "block_tables", "logits_indices", "token_rows")
    }
    shared["cascade"] = steps[0].cascade.to(device) if steps[0].cascade is not None else None
    return [
        dataclasses.replace(step, **{name: rows[index] for name, rows in per_step.items()}, **shared)
        for index, step in enumerate(steps)
    ]


def padded(values: list, size: int, fill) -> list:
    return values + [fill] * (size - len(values))


class StepInputBuilder:
    """Builds `StepInputs` on the host, padded by the backend's rule: no size below `MIN_SIZE`, and no prefill
    that looks like a decode batch (`one_query_per_sequence`)."""

    def __init__(
        self,
        backend: AttentionBackend,
        block_manager: BlockManager,
        max_num_seqs: int,
        decode_batch_sizes: list[int],
    ):
        self.backend = backend
        self.block_manager = block_manager
        self.scratch_row = token_table_rows(max_num_seqs) - 1
        self.decode_batch_sizes = decode_batch_sizes  # empty: no CUDA graphs, decode batches stay as they are

    def build(self, batch: ScheduledBatch) -> list[StepInputs]:
        """One `StepInputs` per step of the batch: a prefill has one, a decode round `batch.num_steps`."""
        steps = [self.prefill(batch)] if batch.is_prefill else self.decode(batch)
        if batch.block_copies:
            copies = torch.tensor(batch.block_copies, dtype=torch.int64)
            steps[0] = dataclasses.replace(steps[0], block_copies=copies)
        return steps

    def prefill(self, batch: ScheduledBatch) -> StepInputs:
        input_ids, positions, seq_index, cu_seqlens, seqlens_k = [], [], [], [0], []
        logits_indices, sampled_rows = [], []
        for index, (seq, num_new) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
            start, end = seq.computed_len, seq.computed_len + num_new
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            seq_index.extend([index] * num_new)
            cu_seqlens.append(cu_seqlens[-1] + num_new)
            seqlens_k.append(end)
            if end == seq.host_len:
                for member in (seq, *seq.forks):  # its forks sample from its last token's logits too
                    logits_indices.append(cu_seqlens[-1] - 1)
                    sampled_rows.append(member.token_row)
        num_tokens, num_seqs = padded_size(len(input_ids)), padded_size(len(batch.seqs))
        if one_query_per_sequence(num_tokens, num_seqs) and max(batch.num_new_tokens) > 1:
            num_tokens += 1  # one more padded token, so that it does not read as one query per sequence
        width = padded_size(max(len(seq.block_table) for seq in batch.seqs))
        block_tables = np.array([padded(seq.block_table, width, 0) for seq in batch.seqs], dtype=np.int32)
        slots = self.block_manager.slots(block_tables, np.array(seq_index), np.array(positions))
        num_logits = padded_size(len(logits_indices))
        return StepInputs(
            input_ids=torch.tensor(padded(input_ids, num_tokens, 0), dtype=torch.int64),
            token_rows=None,
            sampled_rows=torch.tensor(padded(sampled_rows, num_logits, self.scratch_row), dtype=torch.int64),
            positions=torch.tensor(padded(positions, num_tokens, 0), dtype=torch.int64),
            slot_mapping=torch.tensor(padded(slots.tolist(), num_tokens, -1), dtype=torch.int64),
            cu_seqlens_q=torch.tensor(padded(cu_seqlens, num_seqs + 1, cu_seqlens[-1]), dtype=torch.int32),
            seqlens_k=torch.tensor(padded(seqlens_k, num_seqs, 0), dtype=torch.int32),
            block_tables=torch.from_numpy(np.pad(block_tables, ((0, num_seqs - len(batch.seqs)), (0, 0)))),
            max_seqlen_q=padded_size(max(batch.num_new_tokens)),
            max_seqlen_k=padded_size(max(seqlens_k)),
            logits_indices=torch.tensor(padded(logits_indices, num_logits, 0), dtype=torch.int64),
            is_prefill=True,
        )

    def decode_batch_size(self, num_seqs: int) -> int:
        """The padded size of a decode batch: the smallest captured one that holds it, if any does."""
        if not self.decode_batch_sizes or num_seqs > self.decode_batch_sizes[-1]:
            return padded_size(num_seqs)
        return next(size for size in self.decode_batch_sizes if size >= num_seqs)

    def decode(self, batch: ScheduledBatch) -> list[StepInputs]:
        """The steps of a decode round. Step `i` feeds each sequence its token `i` of the round: the newest
        in the token table, which the step before wrote. A sequence with fewer steps than the round sits out
        the rest: its slot is -1 (nothing written), its position stays put and its samples go to the
        scratch row.

        Padded to a captured batch size; block tables always the backend's width and `max_seqlen_k` fixed at
        `max_model_len`, so that only the batch size ever changes a graph."""
        size = self.decode_batch_size(len(batch.seqs))
        num_seqs, num_steps = len(batch.seqs), batch.num_steps
        block_tables = np.zeros((size, self.backend.block_table_width), dtype=np.int32)
        for row, seq in enumerate(batch.seqs):
            block_tables[row, : len(seq.block_table)] = seq.block_table
        # [step, sequence]: a sequence's position advances until its last step, then stays put
        first_positions = np.array([seq.device_len - 1 for seq in batch.seqs], dtype=np.int64)
        steps_taken = np.array(batch.num_new_tokens, dtype=np.int64)
        step_index = np.arange(num_steps)[:, None]
        takes_step = step_index < steps_taken
        positions = first_positions + np.minimum(step_index, steps_taken - 1)
        slots = np.where(
            takes_step, self.block_manager.slots(block_tables, np.arange(num_seqs), positions), -1
        )
        token_rows = np.array([seq.token_row for seq in batch.seqs], dtype=np.int64)
        sampled_rows = np.where(takes_step, token_rows, self.scratch_row)

        def padded_steps(values: np.ndarray, fill: int, dtype: torch.dtype) -> torch.Tensor:
            out = np.full((num_steps, size), fill, dtype=np.int64)
            out[:, :num_seqs] = values
            return torch.from_numpy(out).to(dtype)

        all_positions = padded_steps(positions, 0, torch.int64)
        all_slots = padded_steps(slots, -1, torch.int64)
        all_seqlens = padded_steps(positions + 1, 0, torch.int32)
        all_sampled_rows = padded_steps(sampled_rows, self.scratch_row, torch.int64)
        cascade = self.backend.cascade_plan(block_tables, all_seqlens.numpy())
        shared = dict(
            input_ids=None,
            token_rows=torch.tensor(padded(token_rows.tolist(), size, self.scratch_row), dtype=torch.int64),
            cu_seqlens_q=torch.arange(size + 1, dtype=torch.int32),
            block_tables=torch.from_numpy(block_tables),
            max_seqlen_q=MIN_SIZE,  # one query each; the bound kept at MIN_SIZE as every other one
            max_seqlen_k=self.backend.max_model_len,
            logits_indices=torch.arange(size),
            is_prefill=False,
            cascade=cascade,
        )
        return [
            StepInputs(
                positions=all_positions[step],
                slot_mapping=all_slots[step],
                seqlens_k=all_seqlens[step],
                sampled_rows=all_sampled_rows[step],
                **shared,
            )
            for step in range(num_steps)
        ]


def dummy_step(
    backend: AttentionBackend, num_tokens: int, num_seqs: int, cascade: bool = False
) -> StepInputs:
    """A step that computes nothing that matters and writes no KV (every slot -1): `num_seqs` sequences
    sharing `num_tokens` tokens as evenly as possible, each attending to its own tokens through block 0.
    One query per sequence is a decode step (what graph capture records for a batch size); more is a
    prefill (start-up's compile and the memory profile of a full-budget step). `cascade`: a decode step
    attended by cascade, with a plan of no groups."""
    num_tokens, num_seqs = padded_size(num_tokens), padded_size(num_seqs)
    is_prefill = not one_query_per_sequence(num_tokens, num_seqs)
    lengths = [num_tokens // num_seqs + (i < num_tokens % num_seqs) for i in range(num_seqs)]
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
    return StepInputs(
        input_ids=torch.zeros(num_tokens, dtype=torch.int64),
        token_rows=torch.zeros(num_seqs, dtype=torch.int64),
        sampled_rows=torch.zeros(num_seqs, dtype=torch.int64),
        positions=torch.cat([torch.arange(n) for n in lengths]),
        slot_mapping=torch.full((num_tokens,), -1, dtype=torch.int64),
        cu_seqlens_q=torch.tensor(cu_seqlens, dtype=torch.int32),
        seqlens_k=torch.tensor(lengths, dtype=torch.int32),
        block_tables=torch.zeros(num_seqs, backend.block_table_width, dtype=torch.int32),
        max_seqlen_q=padded_size(max(lengths)),
        max_seqlen_k=backend.max_model_len if not is_prefill else padded_size(max(lengths)),
        logits_indices=torch.tensor(cu_seqlens[1:] - 1, dtype=torch.int64),
        is_prefill=is_prefill,
        cascade=(
            empty_plan(num_seqs, backend.block_table_width, num_seqs) if cascade and not is_prefill else None
        ),
    )
