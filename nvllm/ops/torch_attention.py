"""The pure-PyTorch backend: runs on any device, and is the oracle the flash-attn backend is tested against.

It gathers each sequence's blocks into a dense K/V and calls SDPA with the causal mask shifted by the
cached prefix, one sequence at a time: simple to check by eye, not fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from nvllm.ops.attention_ops import PagedBatch


def store_kvcache(key, value, k_cache, v_cache, slot_mapping) -> None:
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].long()
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, key[valid].to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, value[valid].to(v_cache.dtype))


def attention(query, k_cache, v_cache, batch: PagedBatch, scale: float) -> torch.Tensor:
    """The causal attention of `nvllm::attention`, one sequence at a time (nothing to split)."""
    out = query.new_zeros(query.shape)  # contiguous whatever the query's layout, as the op promises
    block_size = k_cache.shape[1]
    starts = batch.cu_seqlens_q.tolist()
    for i, len_k in enumerate(batch.seqlens_k.tolist()):
        start, end = starts[i], starts[i + 1]
        len_q = end - start
        if len_q == 0 or len_k == 0:
            continue  # padding
        blocks = batch.block_tables[i, : -(-len_k // block_size)].long()
        key = k_cache[blocks].flatten(0, 1)[:len_k]
        value = v_cache[blocks].flatten(0, 1)[:len_k]
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
