"""Cascade attention's plan for a decode round: which sequences share leading KV blocks, and the rule that
decides where reading a shared prefix once pays.

Sequences admitted under one cached prefix hold the very same physical blocks at the start of their block
tables. A cascade step attends all of a group's queries, as one non-causal query sequence, to the group's
prefix (its KV read once instead of once per sequence), attends each query to its own remainder (the
blocks after the prefix), and merges the two partial results by their softmax log-sum-exps
(`nvllm.layers.attention`). The plan is made on the host once per decode round: the block tables are the
round's, and the prefix blocks are full of computed KV before the round starts, so it holds for every step.

Tensors have static shapes for the CUDA graphs: one row per (padded) batch row and `MAX_CASCADE_GROUPS`
groups, the unused ones empty.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from nvllm.transfer import to_device

# Groups one cascade step serves (the largest first; sequences of the others attend the plain way). A
# static bound: flash-attn's prefix pass launches thread blocks for every group slot, empty or not.
MAX_CASCADE_GROUPS = 16

# `attention.cascade=auto` serves a group by cascade when the prefix reads it saves per step,
# prefix_len * (group_size - 1) tokens of KV, reach this many: below it, the extra kernels of a cascade step
# (the prefix pass, the gathers and the merge, per layer) cost more than reading the prefix per sequence.
# An estimate for the Qwen3-0.6B shape (8 KV heads of 128) on the H200, to be set from
# `python -m experiments.cascade_crossover`, which measures decode steps both ways over a grid of prefix
# lengths and group sizes.
CASCADE_MIN_SAVED_TOKENS = 8192


def cascade_pays(prefix_len: int, group_size: int, mode: str) -> bool:
    """Whether a group of `group_size` sequences sharing `prefix_len` tokens of leading KV is served by
    cascade (`on`: every group of two or more; `auto`: where the saved reads reach the threshold)."""
    if mode == "off" or group_size < 2 or prefix_len < 1:
        return False
    return mode == "on" or prefix_len * (group_size - 1) >= CASCADE_MIN_SAVED_TOKENS


@dataclass
class CascadePlan:
    """One decode round's prefix groups. Rows are the batch's (padded) rows; `query_order` lists the rows of
    group 0, then group 1, ..., then every row in no group; group g's queries are rows
    `group_cu_seqlens_q[g]:group_cu_seqlens_q[g + 1]` of the batch taken in that order, and its prefix is
    the first `group_cu_seqlens_k[g + 1] - group_cu_seqlens_k[g]` tokens of row `group_rows[g]`'s blocks."""

    query_order: torch.Tensor  # [rows] int64
    batch_order: torch.Tensor  # [rows] int64: the inverse permutation (a row's place in query_order)
    prefix_lens: torch.Tensor  # [rows] int32: the row's group's prefix length, 0 in no group
    prefix_blocks: torch.Tensor  # [rows] int64: the same in blocks (where the row's remainder starts)
    group_rows: torch.Tensor  # [MAX_CASCADE_GROUPS] int64: a row of each group (0 for the empty ones)
    group_cu_seqlens_q: torch.Tensor  # [MAX_CASCADE_GROUPS + 1] int32
    group_cu_seqlens_k: torch.Tensor  # [MAX_CASCADE_GROUPS + 1] int32
    max_group_size: int  # an upper bound on any group's rows, at least 2
    kv_splits: int  # KV splits of the remainder pass (chosen by the backend for the longest remainder)

    def to(self, device: torch.device | str) -> CascadePlan:
        tensors = {
            field.name: to_device(getattr(self, field.name), device)
            for field in dataclasses.fields(self)
            if isinstance(getattr(self, field.name), torch.Tensor)
        }
        return dataclasses.replace(self, **tensors)

    @property
    def saved_kv_tokens(self) -> int:
        """KV tokens a step of this plan does not read, against the plain path: each group's prefix once per
        member but one."""
        prefix_lens = np.diff(self.group_cu_seqlens_k.numpy())
        return int(self.prefix_lens.sum()) - int(prefix_lens.sum())


def decode_kv_reads(seqlens_k: torch.Tensor, plan: CascadePlan | None) -> tuple[int, int]:
    """KV tokens a decode step reads (every layer reads as many), and how many the plain path would read:
    each row's whole context, less what the plan's groups share."""
    plain = int(seqlens_k.sum())
    return plain - (plan.saved_kv_tokens if plan is not None else 0), plain


def prefix_groups(block_tables: np.ndarray, seqlens_k: np.ndarray, block_size: int) -> list[tuple[list, int]]:
    """Rows that share leading blocks, as (rows, shared full blocks), for rows of a decode step whose
    sequences are `seqlens_k` tokens long (0: padding). Only blocks before each row's newest token count:
    they are full of computed KV (a shared block always is; the zeros padding a block table are not blocks).
    Rows are grouped by their first block; a group's prefix is what all its rows share."""
    full_blocks = np.where(seqlens_k > 0, (seqlens_k - 1) // block_size, 0)
    by_first_block: dict[int, list[int]] = {}
    for row in np.flatnonzero(full_blocks > 0).tolist():
        by_first_block.setdefault(int(block_tables[row, 0]), []).append(row)
    groups = []
    for rows in by_first_block.values():
        if len(rows) < 2:
            continue
        reach = int(full_blocks[rows].min())
        same = block_tables[rows, :reach] == block_tables[rows[0], :reach]
        shared = int(np.cumprod(same.all(axis=0)).sum())
        groups.append((rows, shared))
    return groups


def plan_cascade(
    block_tables: np.ndarray, step_seqlens_k: np.ndarray, block_size: int, mode: str, kv_splits
) -> CascadePlan | None:
    """The plan of a decode round whose steps' sequence lengths are `step_seqlens_k` ([steps, rows]), or None
    where no group pays. `kv_splits(longest_remainder)` is the backend's choice of KV splits."""
    num_rows = block_tables.shape[0]
    candidates = [
        (rows, shared * block_size)
        for rows, shared in prefix_groups(block_tables, step_seqlens_k[0], block_size)
        if cascade_pays(shared * block_size, len(rows), mode)
    ]
    if not candidates:
        return None
    candidates.sort(key=lambda group: group[1] * (len(group[0]) - 1), reverse=True)
    groups = candidates[:MAX_CASCADE_GROUPS]
    prefix_lens = np.zeros(num_rows, dtype=np.int32)
    group_rows = np.zeros(MAX_CASCADE_GROUPS, dtype=np.int64)
    cu_q = np.zeros(MAX_CASCADE_GROUPS + 1, dtype=np.int32)
    cu_k = np.zeros(MAX_CASCADE_GROUPS + 1, dtype=np.int32)
    ordered = []
    for index, (rows, prefix_len) in enumerate(groups):
        prefix_lens[rows] = prefix_len
        group_rows[index] = rows[0]
        ordered.extend(rows)
        cu_q[index + 1] = len(ordered)
        cu_k[index + 1] = cu_k[index] + prefix_len
    cu_q[len(groups) + 1 :], cu_k[len(groups) + 1 :] = cu_q[len(groups)], cu_k[len(groups)]
    grouped = np.zeros(num_rows, dtype=bool)
    grouped[ordered] = True
    query_order = np.concatenate([np.array(ordered, dtype=np.int64), np.flatnonzero(~grouped)])
    longest_remainder = int((step_seqlens_k - prefix_lens).max())
    return CascadePlan(
        query_order=torch.from_numpy(query_order),
        batch_order=torch.from_numpy(np.argsort(query_order)),
        prefix_lens=torch.from_numpy(prefix_lens),
        prefix_blocks=torch.from_numpy(prefix_lens.astype(np.int64) // block_size),
        group_rows=torch.from_numpy(group_rows),
        group_cu_seqlens_q=torch.from_numpy(cu_q),
        group_cu_seqlens_k=torch.from_numpy(cu_k),
        max_group_size=max(2, max(len(rows) for rows, _ in groups)),
        kv_splits=kv_splits(longest_remainder),
    )


def empty_plan(num_rows: int, max_group_size: int, kv_splits: int) -> CascadePlan:
    """A plan with no group (every row attends its whole KV as its remainder): what graph capture records a
    cascade step with, and the static buffers replays copy real plans into."""
    return CascadePlan(
        query_order=torch.arange(num_rows),
        batch_order=torch.arange(num_rows),
        prefix_lens=torch.zeros(num_rows, dtype=torch.int32),
        prefix_blocks=torch.zeros(num_rows, dtype=torch.int64),
        group_rows=torch.zeros(MAX_CASCADE_GROUPS, dtype=torch.int64),
        group_cu_seqlens_q=torch.zeros(MAX_CASCADE_GROUPS + 1, dtype=torch.int32),
        group_cu_seqlens_k=torch.zeros(MAX_CASCADE_GROUPS + 1, dtype=torch.int32),
        max_group_size=max_group_size,
        kv_splits=kv_splits,
    )
