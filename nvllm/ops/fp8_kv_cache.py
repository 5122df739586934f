"""The FP8 KV cache (`cache.dtype=fp8`): keys and values stored as float8 e4m3, one byte an element.

Scale: one per tensor, fixed at 1.0 (vLLM's default without calibration): a key or value is stored as itself,
saturated at e4m3's largest finite value (448) so that an outlier is clipped instead of becoming NaN. Keys
come out of the per-head RMSNorm, values out of a projection, both well inside that range and above e4m3's
smallest normal value for the models served; e4m3's 3 mantissa bits then round each element to within 1/16
of itself. The dtype of the cache tensors says which format a kernel reads, so no op takes a new argument.

Readers: the torch backend and the Triton decode kernel convert each element to the queries' dtype (exact:
every e4m3 value is a bf16 value); flash-attn 2, which reads only 16-bit caches, gets the blocks a step's
block tables name dequantized into a scratch cache of the queries' dtype (`dequantized_blocks`).
"""

from __future__ import annotations

import torch

FP8_KV = torch.float8_e4m3fn


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


def dequantized_blocks(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    num_columns: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The blocks of the first `num_columns` columns of `block_tables` `[rows, width]`, K and V in `dtype`, as
    a scratch cache of their own, and the block tables `[rows, num_columns]` that address it. Shapes follow
    the block tables' alone (no host sync: capturable in a CUDA graph)."""
    blocks = block_tables[:, :num_columns]
    scratch_tables = torch.arange(blocks.numel(), dtype=torch.int32, device=blocks.device).view(blocks.shape)
    flat = blocks.flatten().long()
    return k_cache[flat].to(dtype), v_cache[flat].to(dtype), scratch_tables
