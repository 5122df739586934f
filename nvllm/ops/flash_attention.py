"""The CUDA backend: flash-attn's varlen attention over the paged cache for prefill and cascade's prefix
pass, nvllm's Triton kernels for decode (`nvllm.ops.paged_decode_attention`, which outran flash-attn's
decode kernel on all but a few batch shapes:
experiments/results/2026-12-01-h200-triton-decode-attention.md) and for the queries and keys' norm and
RoPE with the cache write (`nvllm.ops.qk_norm_rope_kernel`). An fp8 cache is read by the decode kernel as
it is and dequantized block by block for flash-attn (`nvllm.ops.fp8_kv_cache`).

Everything here is capturable in a CUDA graph (no host syncs, no data-dependent shapes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flash_attn import flash_attn_varlen_func

from nvllm.attention.backend import one_query_per_sequence
from nvllm.attention.flash_attn_backend import FlashAttnBackend
from nvllm.attention.paging import blocks_for
from nvllm.ops.fp8_kv_cache import dequantized_blocks, is_fp8, numbered_scratch
from nvllm.ops.paged_batch import PagedBatch, PrefixBatch
from nvllm.ops.paged_decode_attention import paged_decode_attention
from nvllm.ops.qk_norm_rope_kernel import qk_norm_rope_store  # noqa: F401  (served as it is)


def attention(query, k_cache, v_cache, batch: PagedBatch, scale: float) -> torch.Tensor:
    if one_query_per_sequence(query.shape[0], batch.seqlens_k.shape[0]):
        tables = batch.block_tables
        out, _ = decode_attention_with_lse(query, k_cache, v_cache, batch.seqlens_k, tables, scale)
        return out
    cu_seqlens_k = F.pad(batch.seqlens_k.cumsum(0, dtype=torch.int32), (1, 0))
    k_cache, v_cache, block_tables = _readable(
        query, k_cache, v_cache, batch.block_tables, batch.max_seqlen_k
    )
    return flash_attn_varlen_func(
        query,
        k_cache,
        v_cache,
        batch.cu_seqlens_q,
        cu_seqlens_k,
        batch.max_seqlen_q,
        batch.max_seqlen_k,
        softmax_scale=scale,
        causal=True,
        block_table=block_tables,
    )


def _readable(query, k_cache, v_cache, block_tables, max_seqlen_k: int):
    """The caches and block tables flash-attn reads: an fp8 cache's blocks that the first `max_seqlen_k`
    tokens of each table reach, dequantized into a scratch cache of the queries' dtype (flash-attn 2 reads
    16-bit caches only); a 16-bit cache as it is."""
    if not is_fp8(k_cache):
        return k_cache, v_cache, block_tables
    num_columns = min(block_tables.shape[1], blocks_for(max_seqlen_k, k_cache.shape[1]))
    return dequantized_blocks(k_cache, v_cache, block_tables, num_columns, query.dtype)


def prefix_attention(
    query, k_cache, v_cache, batch: PrefixBatch, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    block_tables = batch.block_tables
    if is_fp8(k_cache) and batch.scratch_block_tables is not None:  # numbered by the plan, once a round
        k_cache, v_cache = numbered_scratch(
            k_cache, v_cache, batch.scratch_sources, batch.scratch_count, query.dtype
        )
        block_tables = batch.scratch_block_tables
    else:
        k_cache, v_cache, block_tables = _readable(query, k_cache, v_cache, block_tables, batch.max_seqlen_k)
    out, lse, _ = flash_attn_varlen_func(
        query,
        k_cache,
        v_cache,
        batch.cu_seqlens_q,
        batch.cu_seqlens_k,
        batch.max_seqlen_q,
        batch.max_seqlen_k,
        softmax_scale=scale,
        causal=False,
        block_table=block_tables,
        return_attn_probs=True,  # the log-sum-exp (no probabilities are computed without dropout)
    )
    return out, lse


def decode_attention_with_lse(
    query, k_cache, v_cache, seqlens_k, block_tables, scale
) -> tuple[torch.Tensor, torch.Tensor]:
    splits = FlashAttnBackend.decode_kv_splits(query.shape[0], k_cache.shape[2])
    return paged_decode_attention(query, k_cache, v_cache, seqlens_k, block_tables, scale, splits)
