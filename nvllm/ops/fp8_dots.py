"""Which of the decode kernel's two dots run on the fp8 tensor cores over an fp8 KV cache (`fp8_dots`), their
quantization (the Triton helpers in `nvllm.ops.fp8_dots_kernel` round as the torch functions here do), and a
torch reference of the kernel in each mode, which the torch backend runs where a mode is asked for. No Triton
here: the config and the CPU backend import it.

- "none": K and V converted to fp16 in registers, both dots in fp16 (exact conversions).
- "qk": the query quantized to e4m3 per (row, query head), scale `amax / 448` so that its largest element
  lands on e4m3's largest; QKᵀ as an fp8 x fp8 dot accumulated in fp32, K read as stored, the scores scaled
  back by the query's scale. PV as in "none".
- "qk_pv": also PV in fp8: the softmax weights of a tile, in (0, 1] against the running maximum, times
  `WEIGHT_SCALE` (256) rounded to e4m3, V read as stored; the accumulator is divided by 256 at the end. A
  power of two makes the scaling exact, so the rounding is e4m3's alone. Unscaled, every weight below 2^-6
  would be an e4m3 subnormal (a fixed step of 2^-9), and over a long context most weights are that small
  (about 1 / length): tokens under 2^-10 would vanish. Times 256, weights down to 2^-14 of the tile's
  largest keep e4m3's relative step of 2^-4, and the rest err by at most 2^-18 each. (448 would gain less
  than a bit of range and make the unscaling inexact.)
- "swapped_qk": the scores as K·Qᵀ, K (converted to fp16 in registers) the left operand `[tokens, head_dim]`
  and the query the right `[head_dim, 16]`, so that the converted K is an operand in registers instead of
  being staged through shared memory as the right operand; the weights are transposed back for PV (fp16).
- "swapped": both dots transposed, K·Qᵀ and Vᵀ·Pᵀ, in fp16 (`nvllm.ops.transposed_decode_tiles`).

A 16-bit cache takes "none" only.
"""

from __future__ import annotations

import torch

from nvllm.ops.fp8_kv_cache import FP8_KV

FP8_DOTS = ("none", "qk", "qk_pv", "swapped_qk", "swapped")
E4M3_MAX = 448.0  # e4m3's largest finite value
WEIGHT_SCALE = 256.0


def check_fp8_dots(fp8_dots: str, cache_dtype: torch.dtype) -> None:
    """ValueError unless `fp8_dots` is a mode and the cache is fp8 wherever the mode is not "none"."""
    if fp8_dots not in FP8_DOTS:
        raise ValueError(f"fp8_dots={fp8_dots!r}: expected one of {', '.join(FP8_DOTS)}")
    if fp8_dots != "none" and cache_dtype != FP8_KV:
        raise ValueError(f"fp8_dots={fp8_dots!r} reads an fp8 KV cache; this cache is {cache_dtype}")


def to_e4m3(values: torch.Tensor) -> torch.Tensor:
    """fp32 `values` rounded to nearest e4m3 (saturating, as the GPU's conversion does), as fp32."""
    return values.clamp(-E4M3_MAX, E4M3_MAX).to(FP8_KV).float()


def quantize_query(query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's query quantization in torch, over `[..., head_dim]`: the e4m3 values (as fp32) and the
    scales `[...]`."""
    query = query.float()
    amax = query.abs().amax(-1)
    query_scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return to_e4m3(query / query_scale[..., None]), query_scale


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode_reference(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seqlens_k: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    fp8_dots: str,
    num_splits: int = 1,
    block_n: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode kernel's output (fp32) and log-sum-exp in mode `fp8_dots`, on the CPU in fp32 math with
    the same quantization: the same splits and tiles of `block_n` tokens, since "qk_pv" rounds each tile's
    weights against the running maximum of the tiles before it. Operands that "none" and the swapped modes
    convert to fp16 are taken as they are (fp16 rounds the weights by at most 2^-11)."""
    query, k_cache, v_cache, seqlens_k, block_tables = (
        tensor.cpu() for tensor in (query, k_cache, v_cache, seqlens_k, block_tables)
    )
    rows, num_heads, head_dim = query.shape
    group = num_heads // k_cache.shape[2]
    if fp8_dots in ("qk", "qk_pv"):
        values, query_scale = quantize_query(query)
        query, row_scale = values, query_scale * scale
    else:
        query, row_scale = query.float(), torch.full((rows, num_heads), scale)
    out = torch.zeros(rows, num_heads, head_dim)
    lse = torch.full((rows, num_heads), float("-inf"))
    for row, length in enumerate(seqlens_k.tolist()):
        blocks = block_tables[row].long()
        keys = k_cache[blocks].flatten(0, 1)[:length].float().repeat_interleave(group, 1)
        values = v_cache[blocks].flatten(0, 1)[:length].float().repeat_interleave(group, 1)
        split_len = _cdiv(_cdiv(length, num_splits), block_n) * block_n  # as the kernel cuts a row
        parts = []
        for split_start in range(0, length, max(split_len, 1)):
            running_max = torch.full((num_heads,), float("-inf"))
            normaliser, acc = torch.zeros(num_heads), torch.zeros(num_heads, head_dim)
            for start in range(split_start, min(length, split_start + split_len), block_n):
                end = min(length, start + block_n, split_start + split_len)
                scores = torch.einsum("hd,khd->hk", query[row], keys[start:end]) * row_scale[row, :, None]
                new_max = torch.maximum(running_max, scores.amax(1))
                weights = torch.exp(scores - new_max[:, None])
                rescale = torch.exp(running_max - new_max)
                normaliser = normaliser * rescale + weights.sum(1)
                if fp8_dots == "qk_pv":
                    weights = to_e4m3(weights * WEIGHT_SCALE) / WEIGHT_SCALE
                acc = acc * rescale[:, None] + torch.einsum("hk,khd->hd", weights, values[start:end])
                running_max = new_max
            parts.append((acc / normaliser[:, None], running_max + torch.log(normaliser)))
        if parts:
            lses = torch.stack([part_lse for _, part_lse in parts])
            lse[row] = torch.logsumexp(lses, 0)
            shares = torch.exp(lses - lse[row])
            out[row] = sum(
                part_out * share[:, None] for (part_out, _), share in zip(parts, shares, strict=True)
            )
    return out, lse
