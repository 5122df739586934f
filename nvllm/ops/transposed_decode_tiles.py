"""The decode kernel's loop over its KV tiles with both dots transposed (`fp8_dots="swapped"`,
`nvllm.ops.fp8_dots`): the scores as K·Qᵀ `[tokens, rows]` and the output as Vᵀ·Pᵀ `[head_dim, rows]`.

The query rows of a KV head's group are padded to 16, so in the usual order each dot's left operand has 16
rows and the converted K and V are its right operands, which the tensor cores read from shared memory: every
converted element is staged there. Transposed, the converted K `[tokens, head_dim]` and Vᵀ `[head_dim,
tokens]` are left operands of 64 rows or more, which Hopper's warpgroup MMA takes from registers, and only
the small Qᵀ and Pᵀ `[tokens, 16]` go through shared memory. The softmax runs along the tokens' axis 0.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def transposed_tiles(
    query_t,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    kv_head,
    split_start,
    split_end,
    scale,
    BLOCK_SIZE: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """Over KV tokens `[split_start, split_end)` of the row whose block table starts at `block_table_ptr`,
    for the queries `query_t` `[head_dim, rows]` (in DOT_DTYPE): the running maximum and normaliser `[rows]`
    and the unnormalised output `[rows, head_dim]`, as the kernel's own loop leaves them."""
    dims = tl.arange(0, HEAD_DIM)
    tokens = tl.arange(0, BLOCK_N)
    running_max = tl.full([GROUP_ROWS], float("-inf"), tl.float32)
    normaliser = tl.zeros([GROUP_ROWS], tl.float32)
    acc_t = tl.zeros([HEAD_DIM, GROUP_ROWS], tl.float32)
    for start in range(split_start, split_end, BLOCK_N):
        block = tl.load(block_table_ptr + start // BLOCK_SIZE).to(tl.int64)
        slots = block * BLOCK_SIZE + start % BLOCK_SIZE + tokens
        inside = start + tokens < split_end
        key_offsets = (slots[:, None] * NUM_KV_HEADS + kv_head) * HEAD_DIM + dims[None, :]
        key = tl.load(k_cache_ptr + key_offsets, mask=inside[:, None], other=0.0).to(DOT_DTYPE)
        scores_t = tl.dot(key, query_t) * scale
        scores_t = tl.where(inside[:, None], scores_t, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores_t, 0))
        weights_t = tl.exp(scores_t - new_max[None, :])
        rescale = tl.exp(running_max - new_max)
        normaliser = normaliser * rescale + tl.sum(weights_t, 0)
        value_offsets = (slots[None, :] * NUM_KV_HEADS + kv_head) * HEAD_DIM + dims[:, None]
        value_t = tl.load(v_cache_ptr + value_offsets, mask=inside[None, :], other=0.0).to(DOT_DTYPE)
        acc_t = acc_t * rescale[None, :] + tl.dot(value_t, weights_t.to(DOT_DTYPE))
        running_max = new_max
    return running_max, normaliser, tl.trans(acc_t)
