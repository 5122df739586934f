"""Cascade attention inside the model (traced by torch.compile): each group's queries attend once to its
shared prefix (in chunks), every query to its own remainder, and the partial softmaxes are merged by their
log-sum-exps. Gathers and the merge are plain torch code that inductor fuses; the two passes are custom
ops (see nvllm.attention.cascade for the plan)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

import nvllm.ops  # noqa: F401  (registers torch.ops.nvllm.*)
from nvllm.attention.backend import AttentionMetadata


def merge_partials(parts: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Attention over the union of disjoint key sets from the attention over each: `parts` of (output
    `[rows, heads, head_dim]`, softmax log-sum-exp `[rows, heads]`, present `[rows]`), weighted by their
    normalisers `exp(lse)`. A row's part is left out where it is not present, whatever its output and
    log-sum-exp hold; a row with no part is zero. A sum over a fixed list, not a reduction over a stacked
    dimension: inductor fuses it into pointwise kernels."""
    lses = [torch.where(present[:, None], lse, float("-inf")) for _, lse, present in parts]
    top = functools.reduce(torch.maximum, lses)
    top = torch.where(torch.isfinite(top), top, 0.0)  # rows with no part: every weight exp(-inf) = 0
    weights = [torch.exp(lse - top) for lse in lses]
    total = functools.reduce(torch.add, weights)
    merged = functools.reduce(
        torch.add,
        (
            torch.where(present[:, None, None], out.float() * weight[..., None], 0.0)
            for (out, _, present), weight in zip(parts, weights)
        ),
    )
    return (merged / torch.where(total > 0, total, 1.0)[..., None]).to(parts[0][0].dtype)


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
        plan.prefix_scratch_tables,
        plan.prefix_scratch_sources,
        plan.prefix_scratch_count,
    )
    remainder_lens = meta.seqlens_k - plan.prefix_lens
    remainder_out, remainder_lse = torch.ops.nvllm.decode_attention_with_lse(
        query,
        k_cache,
        v_cache,
        remainder_lens,
        plan.remainder_block_tables,
        scale,
        backend,
    )
    # each row's parts: its chunks of the prefix (as many columns in every plan), then its remainder
    prefix_lse = prefix_lse.t()
    parts = [
        (prefix_out[queries], prefix_lse[queries], present)
        for queries, present in zip(plan.partial_rows.unbind(1), plan.has_partial.unbind(1))
    ]
    return merge_partials([*parts, (remainder_out, remainder_lse, remainder_lens > 0)])
