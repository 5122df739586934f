"""The pure-PyTorch backend: runs on any device, and is the oracle the flash-attn backend is tested against.

It gathers each sequence's blocks into a dense K/V and calls SDPA with the causal mask shifted by the
cached prefix, one sequence at a time: simple to check by eye, not fast. Cascade attention's two passes
compute their softmax by hand, in fp32, for the log-sum-exp they return.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nvllm.attention.paging import blocks_for
from nvllm.ops.fp8_kv_cache import is_fp8, to_cache_dtype
from nvllm.ops.norm_ops import rms_norm
from nvllm.ops.paged_batch import PagedBatch, PrefixBatch
from nvllm.ops.rope import rotate_half


def qk_norm_rope_store(
    qkv,
    positions,
    cos_sin,
    q_norm_weight,
    k_norm_weight,
    eps: float,
    num_heads: int,
    num_kv_heads: int,
    k_cache,
    v_cache,
    slot_mapping,
) -> torch.Tensor:
    """`nvllm::qk_norm_rope_store` unfused: the per-head RMSNorm (where there are norm weights), RoPE, then
    the cache write."""
    heads = qkv.unflatten(-1, (-1, cos_sin.shape[1]))
    query, key, value = heads.split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    cos, sin = cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
    if q_norm_weight is not None:
        query, key = rms_norm(query, q_norm_weight, eps), rms_norm(key, k_norm_weight, eps)
    query, key = rotate_half(query, cos, sin), rotate_half(key, cos, sin)
    store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    return query


def store_kvcache(key, value, k_cache, v_cache, slot_mapping) -> None:
    """Each token's K/V `[num_tokens, num_kv_heads, head_dim]` into the cache at `slot_mapping`, in the
    cache's dtype (`nvllm.ops.fp8_kv_cache`); slot -1 writes nothing."""
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].long()
    for cache, new in ((k_cache, key), (v_cache, value)):
        stored = to_cache_dtype(new[valid], cache.dtype)
        if is_fp8(cache):  # the CPU's index_copy_ has no float8 kernel: copy the bytes
            cache, stored = cache.view(torch.uint8), stored.view(torch.uint8)
        cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, stored)


def attention(query, k_cache, v_cache, batch: PagedBatch, scale: float) -> torch.Tensor:
    """The causal attention of `nvllm::attention`, one sequence at a time (nothing to split)."""
    out = query.new_zeros(query.shape)  # contiguous whatever the query's layout, as the op promises
    starts = batch.cu_seqlens_q.tolist()
    for i, len_k in enumerate(batch.seqlens_k.tolist()):
        start, end = starts[i], starts[i + 1]
        len_q = end - start
        if len_q == 0 or len_k == 0:
            continue  # padding
        key, value = _paged_kv(k_cache, v_cache, batch.block_tables[i], len_k)
        # query j sits at position len_k - len_q + j and sees every key up to and including that position
        positions_q = torch.arange(len_k - len_q, len_k, device=query.device)
        mask = torch.arange(len_k, device=query.device)[None, :] <= positions_q[:, None]
        attended = F.scaled_dot_product_attention(
            query[start:end].transpose(0, 1),
            key.transpose(0, 1).to(query.dtype),
            value.transpose(0, 1).to(query.dtype),
            attn_mask=mask,
            scale=scale,
            enable_gqa=True,
        )
        out[start:end] = attended.transpose(0, 1)
    return out


def _paged_kv(
    k_cache, v_cache, block_table: torch.Tensor, num_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `num_tokens` tokens' K and V `[tokens, kv_heads, head_dim]` through one block table."""
    blocks = block_table[: blocks_for(num_tokens, k_cache.shape[1])].long()
    return k_cache[blocks].flatten(0, 1)[:num_tokens], v_cache[blocks].flatten(0, 1)[:num_tokens]


def _attend_with_lse(query, key, value, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query `[q, heads, head_dim]` attends to every key, in fp32: the output in the query's dtype and
    the log-sum-exp `[q, heads]`."""
    group = query.shape[1] // key.shape[1]  # query heads per KV head
    key = key.float().repeat_interleave(group, dim=1)
    value = value.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query.float(), key) * scale
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", torch.exp(scores - lse[..., None]), value)
    return out.to(query.dtype), lse.t()


def prefix_attention(
    query, k_cache, v_cache, batch: PrefixBatch, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each group's queries against its prefix, read from the cache as it is (an fp8 one converted per
    element: the scratch numbering is flash-attn's need, not this backend's)."""
    out = query.new_zeros(query.shape)
    lse = torch.full((query.shape[1], query.shape[0]), float("-inf"), device=query.device)
    starts, prefix_starts = batch.cu_seqlens_q.tolist(), batch.cu_seqlens_k.tolist()
    for group in range(len(starts) - 1):
        start, end = starts[group], starts[group + 1]
        prefix_len = prefix_starts[group + 1] - prefix_starts[group]
        if end == start or prefix_len == 0:
            continue
        key, value = _paged_kv(k_cache, v_cache, batch.block_tables[group], prefix_len)
        out[start:end], group_lse = _attend_with_lse(query[start:end], key, value, scale)
        lse[:, start:end] = group_lse.t()
    return out, lse


def decode_attention_with_lse(
    query, k_cache, v_cache, seqlens_k, block_tables, scale
) -> tuple[torch.Tensor, torch.Tensor]:
    out = query.new_zeros(query.shape)
    lse = torch.full(query.shape[:2], float("-inf"), device=query.device)
    for row, len_k in enumerate(seqlens_k.tolist()):
        if len_k > 0:
            key, value = _paged_kv(k_cache, v_cache, block_tables[row], len_k)
            out[row : row + 1], lse[row : row + 1] = _attend_with_lse(query[row : row + 1], key, value, scale)
    return out, lse
