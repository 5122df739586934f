"""A step as the flat tensors the model takes, padded so that compiled graphs see few shapes (the engine's
`StepInputBuilder` makes them from a scheduled batch).

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
    # prefill: rows whose logits give prompt log-probabilities, computed after the `logits_indices` rows
    # (None: no request of the step asks, and no graph serves a step that has them)
    prompt_logits_indices: torch.Tensor | None = None

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
