"""`(x_q * x_scale) @ (q * scale)ᵀ` on the fp8 tensor cores as one Triton kernel: what `torch._scaled_mm`
computes for `nvllm.ops.fp8.scaled_mm_of_quantized`, for the decode batches between the skinny kernel's 16
rows and `MAX_ROWS`; and for batches of at most `SMALL_BATCH_MAX_ROWS` rows, which quantize their
activations only with `model.fp8_activations`, the same kernel with its tile computed transposed.

cuBLAS ran the 8B's projections at a full decode batch with 128 x 128 output tiles
(experiments/results/2026-12-03-h200-8b-fp8-weights.md), so that a 4096-wide projection of a 256-row batch is
64 tiles, and of a 128-row one 32, on a GPU of 132 SMs: most of them idle while the weight is read. Here the
tile follows the batch. The programs that share a strip of the weight run next to each other (the row tiles
vary fastest), so that the strip is read from memory once and from the L2 after. Which batches take the
kernel, and in which launch shape, is `chosen_config`'s: per weight shape and band of rows the fastest of
`experiments/kernels/fp8_gemm_bench.py`'s grid, or cuBLAS where that was faster; other shapes take the kernel
up to 64 rows, where it was faster at every shape measured, in the shape `gemm_config` picks.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import launch_next_kernel, pdl_launch, wait_for_prior_kernel

MAX_ROWS = 256
SMALL_BATCH_MAX_ROWS = 16  # batches up to here are computed transposed
# False: every batch above the skinny kernel's runs `torch._scaled_mm` (the bench's comparison; its numbers:
# experiments/results/2026-12-03-h200-8b-fp8-gemm-on.md).
ENABLED = True


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# Per weight shape (n, k): (most rows, launch shape or None for cuBLAS) by band of rows, each the fastest of
# the bench's grid at the band's largest batch, or None where torch._scaled_mm was as fast. Qwen3-8B's qkv,
# o, gate/up, down measured on an H200 (experiments/results/2026-12-03-h200-8b-fp8-weights.md);
# Qwen3-30B-A3B's qkv and o on an H100, where the kernel beat cuBLAS at every batch
# (experiments/results/2026-12-06-h100-attention-projections-gemm.md).
CONFIGS: dict[tuple[int, int], tuple[tuple[int, GemmConfig | None], ...]] = {
    (6144, 4096): ((128, GemmConfig(64, 64, 256, 4, 3)), (256, None)),
    (4096, 4096): ((64, GemmConfig(64, 32, 256, 4, 3)), (256, GemmConfig(64, 64, 256, 4, 3))),
    (24576, 4096): ((64, GemmConfig(64, 64, 128, 4, 4)), (256, None)),
    (4096, 12288): (
        (64, GemmConfig(64, 32, 256, 4, 3)),
        (128, GemmConfig(64, 64, 256, 4, 3)),
        (256, GemmConfig(64, 128, 256, 4, 3)),
    ),
    (5120, 2048): ((192, GemmConfig(64, 64, 256, 4, 3)), (256, GemmConfig(64, 64, 128, 4, 4))),
    (2048, 4096): ((128, GemmConfig(64, 32, 256, 4, 3)), (256, GemmConfig(64, 64, 256, 4, 3))),
}
UNMEASURED_MAX_ROWS = 64  # other shapes take the kernel up to here


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def gemm_config(m: int, n: int, num_sms: int) -> GemmConfig:
    """A launch shape for an `m`-row batch against an `n`-row weight on a GPU of `num_sms` SMs, for shapes
    `CONFIGS` does not hold: 64 rows of output a program up to 64 rows of batch, else 128, and the widest
    strip of columns (128, 64 or 32) that still leaves a program for nearly every SM."""
    block_m = 64 if m <= 64 else 128
    row_tiles = triton.cdiv(m, block_m)
    block_n = next((width for width in (128, 64) if row_tiles * triton.cdiv(n, width) >= 0.9 * num_sms), 32)
    return GemmConfig(block_m, block_n, 128, 4 if block_m == 64 else 8, 4)


def small_batch_config(n: int, k: int, num_sms: int) -> GemmConfig:
    """The launch shape of a batch of at most `SMALL_BATCH_MAX_ROWS` rows (computed transposed) against an
    `n x k` weight on a GPU of `num_sms` SMs: 128 weight rows a program where that still leaves a program
    for nearly every SM, else 64 (the fp8 MMA's least); a 256-wide reduction slice three deep, or 128 four
    deep where the reduction is narrower. Not yet swept."""
    block_n = 128 if triton.cdiv(n, 128) >= 0.9 * num_sms else 64
    block_k, num_stages = (256, 3) if k >= 1024 else (128, 4)
    return GemmConfig(SMALL_BATCH_MAX_ROWS, block_n, block_k, 4, num_stages)


def chosen_config(m: int, n: int, k: int, num_sms: int) -> GemmConfig | None:
    """The launch shape for an `m`-row batch against an `n x k` weight (`small_batch_config`'s up to
    `SMALL_BATCH_MAX_ROWS` rows), or None: leave it to `torch._scaled_mm`."""
    if m <= SMALL_BATCH_MAX_ROWS:
        return small_batch_config(n, k, num_sms)
    if m > MAX_ROWS:
        return None
    bands = CONFIGS.get((n, k))
    if bands is None:
        return gemm_config(m, n, num_sms) if m <= UNMEASURED_MAX_ROWS else None
    return next(config for most, config in bands if m <= most)


def device_sms(device: torch.device) -> int:
    """The SMs of a CUDA device (132 elsewhere: an H100's or H200's, for Triton's interpreter)."""
    return _num_sms(device.index or 0) if device.type == "cuda" else 132


@triton.jit
def _fp8_gemm_kernel(
    a_ptr,  # [M, K] fp8
    b_ptr,  # [N, K] fp8
    c_ptr,  # [M, N]
    a_scale_ptr,  # [M] fp32
    b_scale_ptr,  # [N] fp32
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    TRANSPOSED: tl.constexpr,
    PDL: tl.constexpr,
):
    # the row tiles of one column strip are consecutive programs: the strip is read from memory once
    row_tiles = tl.cdiv(M, BLOCK_M)
    tile_m = tl.program_id(0) % row_tiles
    tile_n = tl.program_id(0) // row_tiles
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    columns = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    wait_for_prior_kernel(PDL)  # the activations and their scales are the kernel's before
    # TRANSPOSED (a few rows): weight rows by the batch's rows, so that the weight fills the fp8 MMA's
    # 64-row operand
    if TRANSPOSED:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        a = tl.load(
            a_ptr + rows[:, None] * stride_am + ks[None, :], (rows[:, None] < M) & (ks[None, :] < K), 0.0
        )
        b = tl.load(
            b_ptr + columns[:, None] * stride_bn + ks[None, :],
            (columns[:, None] < N) & (ks[None, :] < K),
            0.0,
        )
        if TRANSPOSED:
            acc = tl.dot(b, tl.trans(a), acc)
        else:
            acc = tl.dot(a, tl.trans(b), acc)
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    if TRANSPOSED:
        acc = tl.trans(acc)
    acc *= tl.load(a_scale_ptr + rows, rows < M, 0.0)[:, None]
    acc *= tl.load(b_scale_ptr + columns, columns < N, 0.0)[None, :]
    out = c_ptr + rows[:, None] * stride_cm + columns[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), (rows[:, None] < M) & (columns[None, :] < N))


def fp8_gemm(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    out_dtype: torch.dtype,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """`(x_q * x_scale[:, None]) @ (q * scale[:, None])ᵀ` in `out_dtype`: `x_q` `[M, K]` and `q` `[N, K]` in
    float8 e4m3 with contiguous rows, their scales fp32 (a row each); accumulated in fp32, scaled, rounded
    once. At most `SMALL_BATCH_MAX_ROWS` rows are computed transposed (weight rows by the batch's rows, so
    that the weight, not the few rows, fills the fp8 MMA's 64-row operand). `config`: the launch shape, else
    `chosen_config`'s, or `gemm_config`'s where that leaves the shape to cuBLAS."""
    m, k = x_q.shape
    n = q.shape[0]
    assert q.shape[1] == k and x_q.stride(1) == 1 and q.stride(1) == 1
    assert x_scale.shape == (m,) and scale.shape == (n,)
    out = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    if m == 0:
        return out
    if config is None:
        num_sms = device_sms(x_q.device)
        config = chosen_config(m, n, k, num_sms) or gemm_config(m, n, num_sms)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    _fp8_gemm_kernel[grid](
        x_q,
        q,
        out,
        x_scale.contiguous(),
        scale.contiguous(),
        m,
        n,
        k,
        x_q.stride(0),
        q.stride(0),
        out.stride(0),
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        TRANSPOSED=m <= SMALL_BATCH_MAX_ROWS,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **pdl_launch(x_q.device),
    )
    return out
