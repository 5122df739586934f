"""Cascade attention inside the model (traced by torch.compile): each group's queries attend once to its
shared prefix, every query to its own remainder, and the two partial softmaxes are merged by their
log-sum-exps. Gathers and the merge are plain torch code that inductor fuses; the two passes are custom
ops (see nvllm.attention.cascade for the plan)."""

from __future__ import annotations

import torch

import nvllm.ops  # noqa: F401  (registers torch.ops.nvllm.*)
from nvllm.attention.backend import AttentionMetadata


def merge_by_lse(
    out_a: torch.Tensor,
    lse_a: torch.Tensor,
    has_a: torch.Tensor,
    out_b: torch.Tensor,
    lse_b: torch.Tensor,
    has_b: torch.Tensor,
) -> torch.Tensor:
    """Attention over the union of two disjoint key sets from the attention over each: outputs
    `[rows, heads, head_dim]` weighted by their softmax normalisers `exp(lse)` `[rows, heads]`. A row's part
    is left out where `has_*` (per row) is false, whatever its output and log-sum-exp hold; a row with
    neither part is zero."""
    lse_a = torch.where(has_a[:, None], lse_a, float("-inf"))
    lse_b = torch.where(has_b[:, None], lse_b, float("-inf"))
    top = torch.maximum(lse_a, lse_b)
    top = torch.where(torch.isfinite(top), top, 0.0)  # rows with neither part: weights exp(-inf) = 0
    weight_a, weight_b = torch.exp(lse_a - top), torch.exp(lse_b - top)
    merged = torch.where(has_a[:, None, None], out_a.float() * weight_a[..., None], 0.0) + torch.where(
        has_b[:, None, None], out_b.float() * weight_b[..., None], 0.0
    )
    total = weight_a + weight_b
    return (merged / torch.where(total > 0, total, 1.0)[..., None]).to(out_a.dtype)


def cascade_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    backend: str,
) -> torch.Tensor:
    """A decode step's attention (one query per row) by the plan `meta.cascade`."""
    plan = meta.cascade
    block_tables = meta.block_tables
    prefix_out, prefix_lse = torch.ops.nvllm.prefix_attention(
        query[plan.query_order],
        k_cache,
        v_cache,
        plan.group_cu_seqlens_q,
        plan.group_cu_seqlens_k,
        block_tables[plan.group_rows],
        plan.max_group_size,
        meta.max_seqlen_k,
        scale,
        backend,
    )
    # a row's remainder: its blocks after the prefix (the table's last column repeats past its end, unread)
    width = block_tables.shape[1]
    columns = torch.arange(width, device=block_tables.device) + plan.prefix_blocks[:, None]
    remainder_tables = block_tables.gather(1, columns.clamp(max=width - 1))
    remainder_lens = meta.seqlens_k - plan.prefix_lens
    remainder_out, remainder_lse = torch.ops.nvllm.decode_attention_with_lse(
        query, k_cache, v_cache, remainder_lens, remainder_tables, meta.decode_kv_splits, scale, backend
    )
    return merge_by_lse(
        prefix_out[plan.batch_order],
        prefix_lse.t()[plan.batch_order],
        plan.prefix_lens > 0,
        remainder_out,
        remainder_lse,
        remainder_lens > 0,
    )
