"""The fp8 KV cache's blocks that a step's block tables name, dequantized into a scratch cache for
flash-attn (`nvllm.ops.fp8_kv_cache.dequantized_blocks`), each distinct block once: one program a chunk of
an entry's block, which returns at once unless the entry is its block's first use. The grid follows the
tables' shape alone, so the launch is captured in CUDA graphs like the rest of a step."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 4096  # elements of a block a program converts, K's and V's


@triton.jit
def _dequantize_first_uses_kernel(
    k_cache_ptr,
    v_cache_ptr,
    k_scratch_ptr,
    v_scratch_ptr,
    blocks_ptr,
    scratch_blocks_ptr,
    first_ptr,
    BLOCK_ELEMENTS: tl.constexpr,
    CHUNK: tl.constexpr,
):
    entry = tl.program_id(0)
    if tl.load(first_ptr + entry) == 0:
        return  # a later use of a block that its first use converts
    block = tl.load(blocks_ptr + entry).to(tl.int64)
    scratch_block = tl.load(scratch_blocks_ptr + entry).to(tl.int64)
    elements = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    inside = elements < BLOCK_ELEMENTS
    source = block * BLOCK_ELEMENTS + elements
    target = scratch_block * BLOCK_ELEMENTS + elements
    k = tl.load(k_cache_ptr + source, mask=inside)
    tl.store(k_scratch_ptr + target, k.to(k_scratch_ptr.dtype.element_ty), mask=inside)
    v = tl.load(v_cache_ptr + source, mask=inside)
    tl.store(v_scratch_ptr + target, v.to(v_scratch_ptr.dtype.element_ty), mask=inside)


def dequantize_first_uses(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scratch: torch.Tensor,
    v_scratch: torch.Tensor,
    blocks: torch.Tensor,
    scratch_blocks: torch.Tensor,
    first: torch.Tensor,
) -> None:
    """Block `blocks[i]` of the caches into block `scratch_blocks[i]` of the scratch caches, converted to
    their dtype, for each entry i where `first[i]` (`nvllm.ops.fp8_kv_cache.first_uses`)."""
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and k_scratch.is_contiguous()
    if blocks.numel() == 0:
        return
    block_elements = k_cache[0].numel()
    chunk = min(CHUNK, triton.next_power_of_2(block_elements))
    grid = (blocks.numel(), triton.cdiv(block_elements, chunk))
    _dequantize_first_uses_kernel[grid](
        k_cache,
        v_cache,
        k_scratch,
        v_scratch,
        blocks,
        scratch_blocks,
        first,
        BLOCK_ELEMENTS=block_elements,
        CHUNK=chunk,
    )
