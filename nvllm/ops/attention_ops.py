"""The paged-attention ops as `torch.library` custom ops: `nvllm::qk_norm_rope_store`, which turns the qkv
projection's rows into queries and writes the keys and values into the cache, then the attention over the
cache (`nvllm::attention`, and cascade attention's two passes).

torch.compile sees each op as one opaque node (its fake implementation gives the output's shape), so the
whole model traces with `fullgraph=True` while the backend behind the op is free to do anything: loop in
Python (the torch reference), or call flash-attn. The backend is an op argument (a constant in the graph),
so one process can run both backends side by side, which is how tests compare them.

KV cache layout, per layer: `[num_blocks, block_size, num_kv_heads, head_dim]` for K and for V.
"""

from __future__ import annotations

import torch

from nvllm.ops import torch_attention
from nvllm.ops.op_library import inference_op, register_fake
from nvllm.ops.paged_batch import PagedBatch, PrefixBatch


def _flash_attention_module():
    from nvllm.ops import flash_attention  # imports flash_attn: only where that is installed

    return flash_attention


def _implementation(backend: str):
    return torch_attention if backend == "torch" else _flash_attention_module()


# flexible_layout: inductor may pass the tensors in the layout it produced them in instead of copying each
# into eager's strides first (a copy kernel per tensor, layer and step). Both backends take any layout whose
# last dimension is contiguous (the flash-attn one asserts it).
@inference_op("qk_norm_rope_store", mutates_args=("k_cache", "v_cache"), tags=(torch.Tag.flexible_layout,))
def qk_norm_rope_store(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos_sin: torch.Tensor,
    q_norm_weight: torch.Tensor | None,
    k_norm_weight: torch.Tensor | None,
    eps: float,
    num_heads: int,
    num_kv_heads: int,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str,
) -> torch.Tensor:
    """From the qkv projection's packed rows `[num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]`
    (queries, keys, values, head after head): every query and key head RMS-normed over head_dim (by
    `q_norm_weight` / `k_norm_weight`, both with `eps`; families without q/k norms pass None for both and
    skip it) and rotated by RoPE (rotate-half) at its token's
    position (`cos_sin`: `[max_positions, head_dim]` fp32, each row cos then sin of the rotary
    frequencies); each token's keys and values written into the cache at `slot_mapping` (block_id *
    block_size + offset; slot -1 is a padded token and writes nothing). Returns the queries `[num_tokens,
    num_heads, head_dim]`, contiguous.

    One op, so that the CUDA backend does it in one kernel where the unfused computation took three per layer
    and step (inductor's two for the norms and RoPE, and the cache write). Rounded as the modules round:
    the norm's output to the model's dtype, then RoPE in fp32 on that and rounded again."""
    return _implementation(backend).qk_norm_rope_store(
        qkv,
        positions,
        cos_sin,
        q_norm_weight,
        k_norm_weight,
        eps,
        num_heads,
        num_kv_heads,
        k_cache,
        v_cache,
        slot_mapping,
    )


@register_fake(qk_norm_rope_store)
def _(qkv, positions, cos_sin, q_norm_weight, k_norm_weight, eps, num_heads, *_):
    return qkv.new_empty((qkv.shape[0], num_heads, cos_sin.shape[1]))


@inference_op("attention", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqlens_k: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    backend: str,
) -> torch.Tensor:
    """Causal attention of a flat batch of queries `[num_tokens, num_heads, head_dim]` over the paged cache.

    Sequence i owns queries `cu_seqlens_q[i]:cu_seqlens_q[i+1]`, the last ones of its `seqlens_k[i]` tokens
    (whose K/V, the new ones included, are already in the cache): a prefill, a chunk after a cached
    prefix, and a decode step are the same call. The shapes tell a decode batch (see
    `nvllm.attention.one_query_per_sequence`), not `max_seqlen_q`, an upper bound kept at 2 or more so that
    one compiled graph serves prefill and decode.
    """
    batch = PagedBatch(cu_seqlens_q, seqlens_k, block_tables, max_seqlen_q, max_seqlen_k)
    return _implementation(backend).attention(query, k_cache, v_cache, batch, scale)


@register_fake(attention)
def _(query, *_):
    return query.new_empty(query.shape)  # contiguous (both backends return that), whatever the query's layout


# The two passes of cascade attention (see nvllm.attention.cascade), each returning its softmax log-sum-exp
# (natural log, fp32) beside its output, so that the model merges them.
@inference_op("prefix_attention", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def prefix_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    scale: float,
    backend: str,
    scratch_block_tables: torch.Tensor | None = None,
    scratch_sources: torch.Tensor | None = None,
    scratch_count: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-causal attention of query groups to their shared prefixes: group g's queries are rows
    `cu_seqlens_q[g]:cu_seqlens_q[g + 1]` of `query` and its prefix the first `cu_seqlens_k[g + 1] -
    cu_seqlens_k[g]` tokens of the blocks in `block_tables[g]`. Returns the output `[rows, heads, head_dim]`
    and the log-sum-exp `[heads, rows]` (flash-attn's varlen layout); rows past the last group's are left
    undefined, and so are a group's whose prefix is empty. `scratch_block_tables`, `scratch_sources` and
    `scratch_count`: the blocks' numbering for reading an fp8 cache through a scratch copy
    (`CascadePlan.prefix_scratch_tables`), made once a round; without them a backend that needs it numbers
    the entries itself."""
    batch = PrefixBatch(
        cu_seqlens_q,
        cu_seqlens_k,
        block_tables,
        max_seqlen_q,
        max_seqlen_k,
        scratch_block_tables,
        scratch_sources,
        scratch_count,
    )
    return _implementation(backend).prefix_attention(query, k_cache, v_cache, batch, scale)


@register_fake(prefix_attention)
def _(query, *_):
    return query.new_empty(query.shape), query.new_empty(
        (query.shape[1], query.shape[0]), dtype=torch.float32
    )


@inference_op("decode_attention_with_lse", mutates_args=(), tags=(torch.Tag.flexible_layout,))
def decode_attention_with_lse(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seqlens_k: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i's one query `[rows, heads, head_dim]` attends to the `seqlens_k[i]` tokens of the blocks in
    `block_tables[i]`. Returns the output and the log-sum-exp `[rows, heads]`; a row with no tokens gets a
    zero output and an undefined log-sum-exp."""
    return _implementation(backend).decode_attention_with_lse(
        query, k_cache, v_cache, seqlens_k, block_tables, scale
    )


@register_fake(decode_attention_with_lse)
def _(query, *_):
    return query.new_empty(query.shape), query.new_empty(query.shape[:2], dtype=torch.float32)
