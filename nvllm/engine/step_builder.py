"""A scheduled batch as the runner's `StepInputs` (decode steps read their tokens from the token table, see
there): the host-side work of every step, done on rank 0 — the engine's side, so that the runner needs
nothing of the scheduler."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from nvllm.attention import AttentionBackend, padded_prefill_sizes, padded_size
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.step_inputs import StepInputs, token_table_rows
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import ScheduledBatch


def padded(values: list, size: int, fill) -> list:
    return values + [fill] * (size - len(values))


class StepInputBuilder:
    """Builds `StepInputs` on the host, padded by the backend's rule (`padded_prefill_sizes`: no size below
    `MIN_SIZE`, no prefill that looks like a decode batch), decode batches to the graph plan's sizes."""

    def __init__(
        self, backend: AttentionBackend, block_manager: BlockManager, max_num_seqs: int, plan: GraphPlan
    ):
        self.backend = backend
        self.block_manager = block_manager
        self.scratch_row = token_table_rows(max_num_seqs) - 1
        self.plan = plan  # the decode batch sizes to pad to (none: no CUDA graphs)

    def build(self, batch: ScheduledBatch) -> list[StepInputs]:
        """One `StepInputs` per step of the batch: a prefill has one, a decode round `batch.num_steps`."""
        steps = [self.prefill(batch)] if batch.is_prefill else self.decode(batch)
        if batch.block_copies:
            copies = torch.tensor(batch.block_copies, dtype=torch.int64)
            steps[0] = dataclasses.replace(steps[0], block_copies=copies)
        return steps

    def prefill(self, batch: ScheduledBatch) -> StepInputs:
        input_ids, positions, seq_index, cu_seqlens, seqlens_k = [], [], [], [0], []
        logits_indices, sampled_rows, prompt_logits_indices = [], [], []
        for index, (seq, num_new) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
            start, end = seq.computed_len, seq.computed_len + num_new
            row_of_start = cu_seqlens[-1] - start  # the step's row of position p: row_of_start + p
            prompt_logits_indices.extend(row_of_start + p for p in seq.prompt_logits_positions(num_new))
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            seq_index.extend([index] * num_new)
            cu_seqlens.append(cu_seqlens[-1] + num_new)
            seqlens_k.append(end)
            if end == seq.host_len:
                for member in (seq, *seq.forks):  # its forks sample from its last token's logits too
                    logits_indices.append(cu_seqlens[-1] - 1)
                    sampled_rows.append(member.token_row)
        longest_query = max(batch.num_new_tokens)
        num_tokens, num_seqs = padded_prefill_sizes(len(input_ids), len(batch.seqs), longest_query)
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
            prompt_logits_indices=(
                torch.tensor(prompt_logits_indices, dtype=torch.int64) if prompt_logits_indices else None
            ),
        )

    def decode(self, batch: ScheduledBatch) -> list[StepInputs]:
        """The steps of a decode round. Step `i` feeds each sequence its token `i` of the round: the newest
        in the token table, which the step before wrote. A sequence with fewer steps than the round sits out
        the rest: its slot is -1 (nothing written), its position stays put and its samples go to the
        scratch row.

        Padded to a captured batch size; block tables always the backend's width and `max_seqlen_k` fixed at
        `max_model_len`, so that only the batch size ever changes a graph."""
        size = self.plan.decode_batch_size(len(batch.seqs))
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
            max_seqlen_q=self.plan.decode_max_seqlen_q,
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
