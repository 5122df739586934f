"""The fp8 KV cache's blocks that a step reads through flash-attn, dequantized into a scratch cache
(`nvllm.ops.fp8_kv_cache.numbered_scratch`): a fixed number of programs share out the distinct blocks'
chunks among them, however many blocks there are. A program per entry of the tables (the grid such a launch
needs to be captured in a CUDA graph without knowing the count) would launch tens of thousands of programs
for a cascade prefix of a few blocks, nearly all of them returning at once, and took longer than the
copy itself (experiments/results/2026-12-05-h100-shared-prefix-fp8-trace.md)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 4096  # elements of a block a program converts at a time, K's and V's
PROGRAMS_PER_SM = 4


@triton.jit
def _dequantize_blocks_kernel(
    k_cache_ptr,
    v_cache_ptr,
    k_scratch_ptr,
    v_scratch_ptr,
    sources_ptr,
    count_ptr,
    BLOCK_ELEMENTS: tl.constexpr,
    CHUNK: tl.constexpr,
):
    chunks_a_block: tl.constexpr = (BLOCK_ELEMENTS + CHUNK - 1) // CHUNK
    work = tl.load(count_ptr) * chunks_a_block
    for item in range(tl.program_id(0), work, tl.num_programs(0)):
        scratch_block = item // chunks_a_block
        block = tl.load(sources_ptr + scratch_block).to(tl.int64)
        elements = (item % chunks_a_block) * CHUNK + tl.arange(0, CHUNK)
        inside = elements < BLOCK_ELEMENTS
        source = block * BLOCK_ELEMENTS + elements
        target = scratch_block.to(tl.int64) * BLOCK_ELEMENTS + elements
        k = tl.load(k_cache_ptr + source, mask=inside)
        tl.store(k_scratch_ptr + target, k.to(k_scratch_ptr.dtype.element_ty), mask=inside)
        v = tl.load(v_cache_ptr + source, mask=inside)
        tl.store(v_scratch_ptr + target, v.to(v_scratch_ptr.dtype.element_ty), mask=inside)


def num_programs(device: torch.device, work_items: int) -> int:
    """Programs of a launch: enough to keep every SM busy, no more than the most work there can be."""
    if device.type == "cuda":
        programs = PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    else:  # Triton's interpreter runs the programs one after another: a few show the sharing out
        programs = 3
    return max(1, min(programs, work_items))


def dequantize_blocks(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scratch: torch.Tensor,
    v_scratch: torch.Tensor,
    sources: torch.Tensor,
    count: torch.Tensor,
) -> None:
    """Block `sources[i]` of the caches into block i of the scratch caches, converted to their dtype, for
    each i below `count` (`[1]` int32, on the device: `nvllm.ops.fp8_kv_cache.scratch_sources`)."""
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and k_scratch.is_contiguous()
    if sources.numel() == 0:
        return
    block_elements = k_cache[0].numel()
    chunk = min(CHUNK, triton.next_power_of_2(block_elements))
    most_work = sources.numel() * triton.cdiv(block_elements, chunk)
    _dequantize_blocks_kernel[(num_programs(k_cache.device, most_work),)](
        k_cache,
        v_cache,
        k_scratch,
        v_scratch,
        sources,
        count,
        BLOCK_ELEMENTS=block_elements,
        CHUNK=chunk,
    )
