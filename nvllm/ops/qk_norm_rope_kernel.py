"""`nvllm::qk_norm_rope_store` on CUDA as one Triton kernel, where the unfused modules took three per layer
and step (inductor's two for the norms and RoPE, and the cache write).

One program per head of the packed qkv rows and tile of tokens: a query head is RMS-normed, rotated and
written to the output; a KV head's key is normed, rotated and written into the K cache at each token's
slot, and its value copied into the V cache there. Each program gathers its tokens' positions and cos/sin
rows itself.

Rounded as the modules round (nvllm.layers.norm, nvllm.layers.rotary): the norm in fp32, its output
rounded to the model's dtype, RoPE in fp32 on that rounded value and rounded again.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.fp8_kv_cache import saturation_bound
from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

# Tokens per program, for one head each: a decode step's few tokens leave most of a tile masked, which
# costs little, and a prefill's tiles keep the memory system busy where one token a program does not.
BLOCK_TOKENS = 8


@triton.jit
def _rms_norm_rope(heads_ptr, mask, weight_ptr, cos, sin, eps, HEAD_DIM: tl.constexpr, NORM: tl.constexpr):
    """A tile of heads `[tokens, 1]`, each RMS-normed over head_dim (rounded to the heads' dtype) where
    `NORM`, and rotated: the two halves `[tokens, head_dim / 2]`, in fp32."""
    half = tl.arange(0, HEAD_DIM // 2)[None, :]
    x1 = tl.load(heads_ptr + half, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(heads_ptr + HEAD_DIM // 2 + half, mask=mask, other=0.0).to(tl.float32)
    if NORM:
        mean_square = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / HEAD_DIM
        inverse_rms = tl.rsqrt(mean_square + eps)[:, None]
        dtype = heads_ptr.dtype.element_ty
        w1 = tl.load(weight_ptr + half).to(tl.float32)
        w2 = tl.load(weight_ptr + HEAD_DIM // 2 + half).to(tl.float32)
        x1 = (x1 * inverse_rms * w1).to(dtype).to(tl.float32)
        x2 = (x2 * inverse_rms * w2).to(dtype).to(tl.float32)
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


# one compiled kernel for every batch size (Triton would compile apart for 1 and for multiples of 16)
@triton.jit(do_not_specialize=["num_tokens"])
def _qk_norm_rope_store_kernel(
    qkv_ptr,
    positions_ptr,
    cos_sin_ptr,
    q_norm_weight_ptr,
    k_norm_weight_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    query_ptr,
    num_tokens,
    qkv_row_stride,
    cos_sin_row_stride,
    eps,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_TOKENS: tl.constexpr,
    NORM: tl.constexpr,
    CACHE_MAX: tl.constexpr,
    PDL: tl.constexpr,
):
    overlap_prior_kernel(PDL)
    tokens = tl.program_id(0).to(tl.int64) * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    head = tl.program_id(1)  # query heads first, then KV heads
    inside = tokens < num_tokens
    half = tl.arange(0, HEAD_DIM // 2)[None, :]
    rows = qkv_ptr + tokens[:, None] * qkv_row_stride
    positions = tl.load(positions_ptr + tokens, mask=inside, other=0).to(tl.int64)
    cos_sin_rows = cos_sin_ptr + positions[:, None] * cos_sin_row_stride
    cos = tl.load(cos_sin_rows + half, mask=inside[:, None], other=0.0)
    sin = tl.load(cos_sin_rows + HEAD_DIM // 2 + half, mask=inside[:, None], other=0.0)
    if head < NUM_HEADS:
        mask = inside[:, None]
        queries = rows + head * HEAD_DIM
        q1, q2 = _rms_norm_rope(queries, mask, q_norm_weight_ptr, cos, sin, eps, HEAD_DIM, NORM)
        out = query_ptr + (tokens[:, None] * NUM_HEADS + head) * HEAD_DIM
        tl.store(out + half, q1.to(query_ptr.dtype.element_ty), mask=mask)
        tl.store(out + HEAD_DIM // 2 + half, q2.to(query_ptr.dtype.element_ty), mask=mask)
    else:
        kv_head = head - NUM_HEADS
        slots = tl.load(slot_mapping_ptr + tokens, mask=inside, other=-1).to(tl.int64)
        writes = (slots >= 0)[:, None]  # -1: a padded token, which writes nothing
        keys = rows + (NUM_HEADS + kv_head) * HEAD_DIM
        k1, k2 = _rms_norm_rope(keys, writes, k_norm_weight_ptr, cos, sin, eps, HEAD_DIM, NORM)
        if CACHE_MAX > 0:  # an fp8 cache: the key rounded to the model's dtype as the modules round it,
            # saturated, then rounded to fp8 by the store's conversion (all in registers)
            dtype = qkv_ptr.dtype.element_ty
            k1 = tl.clamp(k1.to(dtype).to(tl.float32), -CACHE_MAX, CACHE_MAX)
            k2 = tl.clamp(k2.to(dtype).to(tl.float32), -CACHE_MAX, CACHE_MAX)
        k_out = k_cache_ptr + (slots[:, None] * NUM_KV_HEADS + kv_head) * HEAD_DIM
        tl.store(k_out + half, k1.to(k_cache_ptr.dtype.element_ty), mask=writes)
        tl.store(k_out + HEAD_DIM // 2 + half, k2.to(k_cache_ptr.dtype.element_ty), mask=writes)
        dims = tl.arange(0, HEAD_DIM)[None, :]
        values = tl.load(rows + (NUM_HEADS + NUM_KV_HEADS + kv_head) * HEAD_DIM + dims, mask=writes)
        if CACHE_MAX > 0:
            values = tl.clamp(values.to(tl.float32), -CACHE_MAX, CACHE_MAX)
        v_out = v_cache_ptr + (slots[:, None] * NUM_KV_HEADS + kv_head) * HEAD_DIM
        tl.store(v_out + dims, values.to(v_cache_ptr.dtype.element_ty), mask=writes)


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
) -> torch.Tensor:
    """See `nvllm::qk_norm_rope_store`. Caches `[num_blocks, block_size, num_kv_heads, head_dim]`,
    contiguous, in the model's dtype or fp8 (`nvllm.ops.fp8_kv_cache`); head_dim a power of two."""
    num_tokens, head_dim = qkv.shape[0], cos_sin.shape[1]
    norm = q_norm_weight is not None
    assert head_dim >= 2 and head_dim == triton.next_power_of_2(head_dim), head_dim
    assert qkv.shape[1] == (num_heads + 2 * num_kv_heads) * head_dim and qkv.stride(1) == 1
    assert cos_sin.shape[1] == head_dim and cos_sin.stride(1) == 1
    assert k_cache.shape[2:] == (num_kv_heads, head_dim)
    assert k_cache.is_contiguous() and v_cache.is_contiguous()
    query = qkv.new_empty((num_tokens, num_heads, head_dim))
    grid = (triton.cdiv(num_tokens, BLOCK_TOKENS), num_heads + num_kv_heads)
    _qk_norm_rope_store_kernel[grid](
        qkv,
        positions,
        cos_sin,
        q_norm_weight if norm else qkv,  # read only where NORM
        k_norm_weight if norm else qkv,
        k_cache,
        v_cache,
        slot_mapping,
        query,
        num_tokens,
        qkv.stride(0),
        cos_sin.stride(0),
        eps,
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_TOKENS=BLOCK_TOKENS,
        NORM=norm,
        CACHE_MAX=saturation_bound(k_cache.dtype),
        num_warps=4,
        **pdl_launch(qkv.device),
    )
    return query
