"""Cascade attention inside the model (traced by torch.compile): each group's queries attend once to its
shared prefix (in chunks), every query to its own remainder, and the partial softmaxes are merged by their
log-sum-exps. Gathers and the merge are plain torch code that inductor fuses; the two passes are custom
ops (see nvllm.attention.cascade for the plan)."""

from __future__ import annotations

import torch

import nvllm.ops  # noqa: F401  (registers torch.ops.nvllm.*)
from nvllm.attention.backend import AttentionMetadata


def merge_partials(outs: torch.Tensor, lses: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Attention over the union of disjoint key sets from the attention over each: partial outputs
    `[rows, parts, heads, head_dim]` weighted by their softmax normalisers `exp(lse)` (`lses`:
    `[rows, parts, heads]`). A row's part is left out where `present` (`[rows, parts]`) is false, whatever
    its output and log-sum-exp hold; a row with no part is zero."""
    lses = torch.where(present[..., None], lses, float("-inf"))
    top = lses.amax(dim=1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, 0.0)  # rows with no part: every weight exp(-inf) = 0
    weights = torch.exp(lses - top)
    merged = torch.where(present[..., None, None], outs.float() * weights[..., None], 0.0).sum(1)
    total = weights.sum(1)
    return (merged / torch.where(total > 0, total, 1.0)[..., None]).to(outs.dtype)


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
    prefix_out, prefix_lse = torch.ops.nvllm.prefix_attention(
        query[plan.prefix_query_rows],
        k_cache,
        v_cache,
        plan.prefix_cu_seqlens_q,
        plan.prefix_cu_seqlens_k,
        plan.prefix_block_tables,
        plan.max_group_size,
        meta.max_seqlen_k,
        scale,
        backend,
    )
    remainder_lens = meta.seqlens_k - plan.prefix_lens
    remainder_out, remainder_lse = torch.ops.nvllm.decode_attention_with_lse(
        query,
        k_cache,
        v_cache,
        remainder_lens,
        plan.remainder_block_tables,
        meta.decode_kv_splits,
        scale,
        backend,
    )
    # each row's parts: its chunks of the prefix, then its remainder
    outs = torch.cat([prefix_out[plan.partial_rows], remainder_out[:, None]], dim=1)
    lses = torch.cat([prefix_lse.t()[plan.partial_rows], remainder_lse[:, None]], dim=1)
    present = torch.cat([plan.has_partial, (remainder_lens > 0)[:, None]], dim=1)
    return merge_partials(outs, lses, present)
