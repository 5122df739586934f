"""Cascade attention's plan for a decode round: which sequences share leading KV blocks, and the rule that
decides where reading a shared prefix once pays.

Sequences admitted under one cached prefix hold the very same physical blocks at the start of their block
tables. A cascade step attends all of a group's queries, as one non-causal query sequence, to the group's
prefix (its KV read once instead of once per sequence; in all but the largest batches, chunk by chunk),
attends each query to its own remainder (the blocks after the prefix), and merges the partial results by
their softmax log-sum-exps (`nvllm.layers.cascade_attention`). The plan is made on the host once per decode
round: the block tables are the round's, and the prefix blocks are full of computed KV before the round
starts, so it holds for every step.

Tensors have static shapes for the CUDA graphs, set by the batch size: one row per (padded) batch row,
`MAX_CASCADE_GROUPS` groups times the batch's chunks of slots, the unused ones empty.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from nvllm.attention.padding import padded_size
from nvllm.ops.fp8_kv_cache import first_uses, scratch_sources
from nvllm.transfer import to_device

# Groups one cascade step serves (the largest first; sequences of the others attend the plain way). A
# static bound: flash-attn's prefix pass launches thread blocks for every group slot, empty or not.
MAX_CASCADE_GROUPS = 16
# Chunks a group's prefix is cut into for the prefix pass, by the batch's (padded) rows: (at most this many
# rows, chunks), larger batches 1. flash-attn's varlen kernel reads a sequence's keys in one thread block
# per 64 queries and head, one tile after another, so a small group's prefix in one piece takes as long as
# that loop over all of it, with most of the GPU idle; each chunk is attended by thread blocks of its own.
# Every chunk costs its copy of the queries and one more part to merge, and large batches have thread
# blocks enough (experiments/results/2026-12-01-h200-shared-prefixes.md).
PREFIX_CHUNKS_BY_ROWS = ((128, 4), (384, 2))


def prefix_chunks(num_rows: int) -> int:
    """Chunks per group's prefix in a decode batch of `num_rows` (padded) rows."""
    return next((chunks for most_rows, chunks in PREFIX_CHUNKS_BY_ROWS if num_rows <= most_rows), 1)


def partial_columns() -> int:
    """Columns of every plan's per-row chunk tables: the most chunks any batch takes (padded by the padding
    rule), a column past a batch's chunks an absent part. The same for every batch size, so that the merge
    of a row's parts is the same fixed sum in every graph: over a count that varied, inductor would compile
    a reduction of a symbolic length, whose configuration it settles by timing its candidates at their first
    launch, on start-up's 2-row batch, where they nearly tie: a pick that was far slower at full batches
    (experiments/results/2026-12-01-h200-shared-prefixes.md)."""
    return padded_size(max(chunks for _, chunks in PREFIX_CHUNKS_BY_ROWS))


def prefix_slots(num_rows: int) -> int:
    """Slots of the prefix pass: a chunk of every group."""
    return MAX_CASCADE_GROUPS * prefix_chunks(num_rows)


def prefix_scratch_blocks(width: int) -> int:
    """Blocks of the scratch cache that the prefix pass reads an fp8 cache through (`prefix_scratch_tables`):
    the distinct blocks of every group's prefix at most, each group's chunks splitting its prefix."""
    return MAX_CASCADE_GROUPS * width


# `attention.cascade=auto` serves a group by cascade when the prefix reads it saves per step,
# prefix_len * (group_size - 1) tokens of KV, reach this many: below it, the extra kernels of a cascade step
# (the prefix pass, the gathers and the merge, per layer) cost more than reading the prefix per sequence.
# Measured for the Qwen3-0.6B shape (8 KV heads of 128) on the H200 by `python -m
# experiments.studies.cascade_crossover`, which times decode steps both ways over a grid of prefix lengths
# and group sizes (experiments/results/2026-12-01-h200-startup-and-cascade-crossover.md): every cell that
# saved this many tokens or more was faster by cascade.
CASCADE_MIN_SAVED_TOKENS = 32512
CASCADE_MODES = ("auto", "on", "off")  # attention.cascade's values, as cascade_pays reads them


def cascade_pays(prefix_len: int, group_size: int, mode: str) -> bool:
    """Whether a group of `group_size` sequences sharing `prefix_len` tokens of leading KV is served by
    cascade (`on`: every group of two or more; `auto`: where the saved reads reach the threshold)."""
    if mode == "off" or group_size < 2 or prefix_len < 1:
        return False
    return mode == "on" or prefix_len * (group_size - 1) >= CASCADE_MIN_SAVED_TOKENS


@dataclass
class CascadePlan:
    """One decode round's prefix groups. Rows are the batch's (padded) rows. The prefix pass is one varlen
    attention over `prefix_slots(rows)` slots: each group's prefix is cut into up to `prefix_chunks(rows)`
    chunks of whole blocks, and each chunk is a slot that attends the group's queries to that chunk alone
    (the prefix then is read by several thread blocks at once, not by one after another). Slot s holds
    the queries `prefix_query_rows[prefix_cu_seqlens_q[s]:prefix_cu_seqlens_q[s + 1]]` and the keys of the
    first `prefix_cu_seqlens_k[s + 1] - prefix_cu_seqlens_k[s]` tokens of `prefix_block_tables[s]`; the
    unused slots are empty. A row's partial results are merged with its remainder's (the blocks after its
    prefix) by their log-sum-exps."""

    prefix_query_rows: torch.Tensor  # [rows * chunks] int64: the batch row of each prefix-pass query
    prefix_cu_seqlens_q: torch.Tensor  # [slots + 1] int32
    prefix_cu_seqlens_k: torch.Tensor  # [slots + 1] int32
    prefix_block_tables: torch.Tensor  # [slots, width] int32: each slot's blocks from its first
    partial_rows: torch.Tensor  # [rows, partial_columns] int64: the prefix-pass query of each row's chunk
    has_partial: torch.Tensor  # [rows, partial_columns] bool: whether the row has that chunk
    prefix_lens: torch.Tensor  # [rows] int32: the row's group's prefix length, 0 in no group
    remainder_block_tables: torch.Tensor  # [rows, width] int32: each row's blocks after its prefix
    # an fp8 cache's prefix blocks are read through a scratch copy (nvllm.ops.fp8_kv_cache), numbered here
    # once a round rather than in every layer of every step: each prefix entry's block in it (entries past
    # a slot's chunk 0), the cache block each scratch block copies (past the distinct ones 0), and how many
    prefix_scratch_tables: torch.Tensor  # [slots, width] int32
    prefix_scratch_sources: torch.Tensor  # [prefix_scratch_blocks(width)] int32
    prefix_scratch_count: torch.Tensor  # [1] int32
    max_group_size: int  # an upper bound on any group's rows, at least 2

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
        return int(self.prefix_lens.sum()) - int(self.prefix_cu_seqlens_k[-1])


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
    block_tables: np.ndarray, step_seqlens_k: np.ndarray, block_size: int, mode: str
) -> CascadePlan | None:
    """The plan of a decode round whose steps' sequence lengths are `step_seqlens_k` ([steps, rows]), or None
    where no group pays."""
    num_rows, width = block_tables.shape
    candidates = [
        (rows, shared)
        for rows, shared in prefix_groups(block_tables, step_seqlens_k[0], block_size)
        if cascade_pays(shared * block_size, len(rows), mode)
    ]
    if not candidates:
        return None
    candidates.sort(key=lambda group: group[1] * (len(group[0]) - 1), reverse=True)
    groups = candidates[:MAX_CASCADE_GROUPS]
    plan = empty_arrays(num_rows, width)
    chunks = prefix_chunks(num_rows)
    prefix_blocks = np.zeros(num_rows, dtype=np.int64)
    slot, num_queries = 0, 0
    for rows, shared in groups:
        prefix_blocks[rows] = shared
        bounds = [shared * chunk // chunks for chunk in range(chunks + 1)]
        for chunk, (first, end) in enumerate(itertools.pairwise(bounds)):
            if end == first:  # a prefix of fewer blocks than chunks
                continue
            queries = np.arange(num_queries, num_queries + len(rows))
            plan["prefix_query_rows"][queries] = rows
            plan["partial_rows"][rows, chunk] = queries
            plan["has_partial"][rows, chunk] = True
            plan["prefix_block_tables"][slot, : width - first] = block_tables[rows[0], first:]
            num_queries += len(rows)
            plan["prefix_cu_seqlens_q"][slot + 1 :] = num_queries
            plan["prefix_cu_seqlens_k"][slot + 1 :] += (end - first) * block_size
            slot += 1
    plan["prefix_lens"] = (prefix_blocks * block_size).astype(np.int32)
    number_prefix_entries(plan, block_size)
    # a row's remainder: its blocks after the prefix (the table's last column repeats past its end, unread)
    columns = np.minimum(np.arange(width) + prefix_blocks[:, None], width - 1)
    plan["remainder_block_tables"] = np.take_along_axis(block_tables, columns, axis=1).astype(np.int32)
    return CascadePlan(
        **{name: torch.from_numpy(array) for name, array in plan.items()},
        max_group_size=max(2, max(len(rows) for rows, _ in groups)),
    )


def number_prefix_entries(plan: dict[str, np.ndarray], block_size: int) -> None:
    """The plan's `prefix_scratch_tables`, `prefix_scratch_sources` and `prefix_scratch_count`, from the
    blocks each slot's chunk reads."""
    slot_blocks = np.diff(plan["prefix_cu_seqlens_k"]) // block_size
    read = np.arange(plan["prefix_block_tables"].shape[1]) < slot_blocks[:, None]
    blocks = torch.from_numpy(plan["prefix_block_tables"][read])
    scratch_blocks, first = first_uses(blocks)
    sources, count = scratch_sources(blocks, scratch_blocks, first, len(plan["prefix_scratch_sources"]))
    plan["prefix_scratch_tables"][read] = scratch_blocks.numpy()
    plan["prefix_scratch_sources"], plan["prefix_scratch_count"] = sources.numpy(), count.numpy()


def empty_arrays(num_rows: int, width: int) -> dict[str, np.ndarray]:
    """A plan's arrays with no group: every row attends its whole KV as its remainder."""
    chunks, slots = prefix_chunks(num_rows), prefix_slots(num_rows)
    return {
        "prefix_query_rows": np.zeros(num_rows * chunks, dtype=np.int64),
        "prefix_cu_seqlens_q": np.zeros(slots + 1, dtype=np.int32),
        "prefix_cu_seqlens_k": np.zeros(slots + 1, dtype=np.int32),
        "prefix_block_tables": np.zeros((slots, width), dtype=np.int32),
        "partial_rows": np.zeros((num_rows, partial_columns()), dtype=np.int64),
        "has_partial": np.zeros((num_rows, partial_columns()), dtype=bool),
        "prefix_lens": np.zeros(num_rows, dtype=np.int32),
        "remainder_block_tables": np.zeros((num_rows, width), dtype=np.int32),
        "prefix_scratch_tables": np.zeros((slots, width), dtype=np.int32),
        "prefix_scratch_sources": np.zeros(prefix_scratch_blocks(width), dtype=np.int32),
        "prefix_scratch_count": np.zeros(1, dtype=np.int32),
    }


def empty_plan(num_rows: int, width: int, max_group_size: int) -> CascadePlan:
    """A plan with no group, over block tables of `width` columns (all zeros): what graph capture records a
    cascade step with, and the static buffers replays copy real plans into."""
    return CascadePlan(
        **{name: torch.from_numpy(array) for name, array in empty_arrays(num_rows, width).items()},
        max_group_size=max_group_size,
    )
