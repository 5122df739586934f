"""The FP8 KV cache (`cache.dtype=fp8`): keys and values stored as float8 e4m3, one byte an element.

Scale: one per tensor, fixed at 1.0 (vLLM's default without calibration): a key or value is stored as itself,
saturated at e4m3's largest finite value (448) so that an outlier is clipped instead of becoming NaN. Keys
come out of the per-head RMSNorm, values out of a projection, both well inside that range and above e4m3's
smallest normal value for the models served; e4m3's 3 mantissa bits then round each element to within 1/16
of itself. The dtype of the cache tensors says which format a kernel reads.

Readers: the torch backend and the Triton decode kernel convert each element to the queries' dtype (exact:
every e4m3 value is a bf16 value); flash-attn 2, which reads only 16-bit caches, gets the blocks a step's
block tables name dequantized into a scratch cache of the queries' dtype (`dequantized_blocks`; for
cascade's prefix pass `numbered_scratch`, the blocks numbered by the round's plan).
"""

from __future__ import annotations

import torch

FP8_KV = torch.float8_e4m3fn
# A scratch copy (`dequantized_blocks`) that room for every entry of its tables would make larger than this
# is sized by the distinct blocks instead, counted on the host: one sync a layer, outside CUDA graphs. A
# prefill of many sequences over a long cached prefix names the prefix's blocks once a sequence, and room for
# every entry could take gigabytes that the KV budget never set aside; a step that large takes long enough
# for a sync a layer to cost little.
EXACT_SCRATCH_ABOVE_BYTES = 2**30


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == FP8_KV


def saturation_bound(cache_dtype: torch.dtype) -> float:
    """The magnitude a value is clipped to before it is stored in a cache of `cache_dtype` (0: none)."""
    return torch.finfo(FP8_KV).max if cache_dtype == FP8_KV else 0.0


def to_cache_dtype(values: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """`values` as a cache of `cache_dtype` stores them (saturated where it is fp8)."""
    if bound := saturation_bound(cache_dtype):
        values = values.clamp(-bound, bound)
    return values.to(cache_dtype)


def first_uses(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each entry of `blocks` (block ids, 1-D): the scratch block it reads, numbered by its block's rank
    among the distinct ones, and whether it is the first entry naming its block (the one that fills the
    scratch block). By a stable sort: static shapes, no host sync."""
    sorted_blocks, order = torch.sort(blocks, stable=True)
    first_sorted = torch.ones_like(sorted_blocks, dtype=torch.bool)
    first_sorted[1:] = sorted_blocks[1:] != sorted_blocks[:-1]
    rank_sorted = first_sorted.cumsum(0, dtype=torch.int32) - 1  # int32: the block tables' dtype
    scratch_blocks = torch.empty_like(rank_sorted).scatter_(0, order, rank_sorted)
    first = torch.empty_like(first_sorted).scatter_(0, order, first_sorted)
    return scratch_blocks, first


def scratch_sources(
    blocks: torch.Tensor, scratch_blocks: torch.Tensor, first: torch.Tensor, num_scratch_blocks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The numbering `first_uses` made of the entries `blocks` (1-D), turned round: for each scratch block
    the cache block it copies (`[num_scratch_blocks]` int32; past the distinct blocks 0, unread), and how
    many there are (`[1]` int32). Static shapes, no host sync: a conversion then has exactly the distinct
    blocks' work to share out, not a program per entry that mostly finds nothing to do."""
    dump = blocks.numel()  # where the entries that are no block's first use scatter to, dropped after
    sources = blocks.new_zeros(max(num_scratch_blocks, dump) + 1, dtype=torch.int32)
    sources.scatter_(0, torch.where(first, scratch_blocks, dump).long(), blocks.to(torch.int32))
    return sources[:num_scratch_blocks], first.sum(dtype=torch.int32).reshape(1)


def dequantized_blocks(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    num_columns: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The blocks of the first `num_columns` columns of `block_tables` `[rows, width]`, K and V in `dtype`, as
    a scratch cache of their own, and the block tables `[rows, num_columns]` that address it. A block that
    several rows name (a shared prefix, a table's padding) is dequantized once: a prefill of many sequences
    under one cached prefix would otherwise write the prefix's blocks once a sequence, in every layer. Shapes
    follow the block tables' alone (no host sync: capturable in a CUDA graph); the scratch cache has room
    for every entry, and its blocks past the distinct ones are left unwritten and unaddressed, unless that
    room would pass `EXACT_SCRATCH_ABOVE_BYTES` outside a capture: then it holds the distinct blocks alone."""
    blocks = block_tables[:, :num_columns].flatten()
    scratch_blocks, first = first_uses(blocks)
    num_scratch_blocks = blocks.numel()
    block_bytes = 2 * k_cache[0].numel() * dtype.itemsize  # K and V
    capturing = k_cache.is_cuda and torch.cuda.is_current_stream_capturing()
    if num_scratch_blocks * block_bytes > EXACT_SCRATCH_ABOVE_BYTES and not capturing:
        num_scratch_blocks = int(first.sum())
    sources, count = scratch_sources(blocks, scratch_blocks, first, num_scratch_blocks)
    k_scratch, v_scratch = numbered_scratch(k_cache, v_cache, sources, count, dtype)
    return k_scratch, v_scratch, scratch_blocks.view(block_tables.shape[0], num_columns)


def numbered_scratch(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    sources: torch.Tensor,
    count: torch.Tensor,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A scratch cache of `len(sources)` blocks in `dtype`, K and V: scratch block i is cache block
    `sources[i]` dequantized, for i below `count` (`[1]`); the blocks past it are left unwritten. The
    numbering is made on the device by `dequantized_blocks`, or on the host where a plan knows the entries in
    advance (cascade attention's prefix pass, `nvllm.attention.cascade`)."""
    scratch_shape = (sources.numel(), *k_cache.shape[1:])
    k_scratch = k_cache.new_empty(scratch_shape, dtype=dtype)
    v_scratch = v_cache.new_empty(scratch_shape, dtype=dtype)
    if k_cache.is_cuda:
        from nvllm.ops.dequantize_blocks_triton import dequantize_blocks

        dequantize_blocks(k_cache, v_cache, k_scratch, v_scratch, sources, count)
    else:  # the reference (a host sync: the CPU has no graphs to capture)
        read = sources[: int(count)].long()
        k_scratch[: read.numel()] = k_cache[read].to(dtype)
        v_scratch[: read.numel()] = v_cache[read].to(dtype)
    return k_scratch, v_scratch
