"""`x @ w.T` for a few rows of `x` (a small decode batch), as one Triton kernel; optionally with the MLP's
activation, `silu(x @ gate.T) * (x @ up.T)` of a packed `[gate; up]` weight, in the same kernel.

With 1-16 rows, a matmul only has to stream the weight once, so it should run at memory bandwidth; cuBLAS'
kernels for some of these shapes stay well below it
(experiments/results/2026-11-29-h200-overlapped-rounds.md). Here each program owns a strip of `BLOCK_N`
output columns: it reads its rows of the weight once, in `BLOCK_K` slices, against the whole (padded)
batch, on the tensor cores.

A narrow weight (few output columns: Qwen3-30B-A3B's o projection and router) gives too few strips to fill
the GPU; with `split_k` each strip's reduction is split over that many programs, their partial sums added
by the last to arrive (`nvllm.ops.split_reduction`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.e4m3_to_bf16 import moves_bits, to_dot_dtype
from nvllm.ops.pdl import launch_next_kernel, pdl_launch, prefetch_to_l2, wait_for_prior_kernel
from nvllm.ops.split_reduction import add_split_partials, split_workspace

MAX_ROWS = 16  # the batch is padded to one 16-row tile (the smallest tensor-core tile)


@triton.jit
def _silu_times(gate, up, dtype: tl.constexpr):
    """`silu(gate) * up` of two fp32 accumulators, each first rounded to `dtype` as the unfused matmul's
    output is, and rounded once at the end as inductor's fused activation kernel does."""
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    return (gate * tl.sigmoid(gate) * up).to(dtype)


@triton.jit
def _prefetch_first_slices(
    w_ptr, columns, n, k, w_row_stride, BLOCK_K: tl.constexpr, GATED: tl.constexpr, LINE: tl.constexpr
):
    """Into the L2, the first two `BLOCK_K` slices of this program's weight rows (both strips where
    GATED): what its main loop reads first, one 128-byte line (`LINE` weight values) a request."""
    lines = tl.arange(0, 2 * BLOCK_K // LINE) * LINE
    inside = (columns[:, None] < n) & (lines[None, :] < k)
    strip = w_ptr + columns[:, None] * w_row_stride + lines[None, :]
    prefetch_to_l2(tl.where(inside, strip, w_ptr))
    if GATED:
        prefetch_to_l2(tl.where(inside, strip + n * w_row_stride, w_ptr))


@triton.jit
def _skinny_matmul_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    scale_ptr,
    partials_ptr,  # [strips, SPLIT_K, BLOCK_M, BLOCK_N] fp32 where SPLIT_K > 1
    counters_ptr,  # [strips] int32, zeros, where SPLIT_K > 1
    num_rows,
    n,
    k,
    x_row_stride,
    w_row_stride,
    y_row_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GATED: tl.constexpr,
    SCALED: tl.constexpr,
    MOVE_BITS: tl.constexpr,
    LINE: tl.constexpr,
    PDL: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """`n` output columns; GATED: weight rows `[0, n)` are the gate's and `[n, 2n)` the up projection's.
    SCALED: an fp8 weight, converted to x's dtype (exactly; by `nvllm.ops.e4m3_to_bf16` where MOVE_BITS),
    each output column times its row's scale. SPLIT_K > 1 (not GATED): the program's share of the
    reduction is its `program_id(1)`-th of `SPLIT_K` runs of whole `BLOCK_K` slices."""
    rows = tl.arange(0, BLOCK_M)
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_begin, k_end = 0, k
    if SPLIT_K > 1:
        run = tl.cdiv(tl.cdiv(k, BLOCK_K), SPLIT_K) * BLOCK_K
        k_begin = tl.program_id(1) * run
        k_end = tl.minimum(k_begin + run, k)
    if PDL:  # the weight is no kernel's output: its first slices can come while the prior kernel finishes
        _prefetch_first_slices(
            w_ptr + k_begin, columns, n, k_end - k_begin, w_row_stride, BLOCK_K, GATED, LINE
        )
    wait_for_prior_kernel(PDL)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(k_begin, k_end, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        x = tl.load(
            x_ptr + rows[:, None] * x_row_stride + ks[None, :],
            mask=(rows[:, None] < num_rows) & (ks[None, :] < k),
            other=0.0,
        )
        w_mask = (columns[:, None] < n) & (ks[None, :] < k)
        w = tl.load(w_ptr + columns[:, None] * w_row_stride + ks[None, :], mask=w_mask, other=0.0)
        acc += tl.dot(x, tl.trans(to_dot_dtype(w, x.dtype, MOVE_BITS)))
        if GATED:
            w_up = tl.load(
                w_ptr + (n + columns[:, None]) * w_row_stride + ks[None, :], mask=w_mask, other=0.0
            )
            acc_up += tl.dot(x, tl.trans(to_dot_dtype(w_up, x.dtype, MOVE_BITS)))
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    if SPLIT_K > 1:
        strip = tl.program_id(0)
        strip_partials = partials_ptr + strip * SPLIT_K * BLOCK_M * BLOCK_N
        acc, last = add_split_partials(
            acc, strip_partials, counters_ptr + strip, tl.program_id(1), SPLIT_K, BLOCK_M, BLOCK_N
        )
        if not last:
            return
    if SCALED:
        acc *= tl.load(scale_ptr + columns, mask=columns < n, other=0.0)[None, :]
        if GATED:
            acc_up *= tl.load(scale_ptr + n + columns, mask=columns < n, other=0.0)[None, :]
    out = y_ptr + rows[:, None] * y_row_stride + columns[None, :]
    if GATED:
        y = _silu_times(acc, acc_up, y_ptr.dtype.element_ty)
    else:
        y = acc.to(y_ptr.dtype.element_ty)
    tl.store(out, y, mask=(rows[:, None] < num_rows) & (columns[None, :] < n))


@triton.jit
def _fma_matmul_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    scale_ptr,
    num_rows,
    n,
    k,
    x_row_stride,
    w_row_stride,
    y_row_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SCALED: tl.constexpr,
    PDL: tl.constexpr,
):
    """`_skinny_matmul_kernel`'s product (not GATED, not split) for at most `BLOCK_M` (1 or 2) rows on the
    CUDA cores: each row's products with the program's `[BLOCK_N, BLOCK_K]` slice of weight are fp32
    multiply-adds into a tile of their own, summed over the reduction once at the end. Where one slice
    holds the whole reduction (`BLOCK_K >= k`), the weight is loaded before the wait for the prior kernel,
    so that its bytes come while that kernel finishes."""
    rows = tl.arange(0, BLOCK_M)
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    strip = w_ptr + columns[:, None] * w_row_stride
    ks = tl.arange(0, BLOCK_K)
    w = tl.load(strip + ks[None, :], mask=(columns[:, None] < n) & (ks[None, :] < k), other=0.0)
    wait_for_prior_kernel(PDL)
    acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        if start > 0:
            w_mask = (columns[:, None] < n) & (ks[None, :] < k)
            w = tl.load(strip + ks[None, :], mask=w_mask, other=0.0)
        x_mask = (rows[:, None] < num_rows) & (ks[None, :] < k)
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + ks[None, :], mask=x_mask, other=0.0)
        acc += w.to(tl.float32)[None, :, :] * x.to(tl.float32)[:, None, :]
    launch_next_kernel(PDL)
    y = tl.sum(acc, 2)
    if SCALED:
        y *= tl.load(scale_ptr + columns, mask=columns < n, other=0.0)[None, :]
    out = y_ptr + rows[:, None] * y_row_stride + columns[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < num_rows) & (columns[None, :] < n))


Config = tuple[int, int, int, int]  # BLOCK_N, BLOCK_K, num_warps, num_stages

# Per weight shape (n, k), the fastest configuration `experiments/kernels/skinny_matmul_bench.py` found on
# the H200 with the weight read from memory, as in a model's step (its numbers:
# experiments/results/2026-12-01-h200-triton-decode-attention.md); None where cuBLAS is faster. Other
# shapes get DEFAULT_CONFIG.
CONFIGS: dict[tuple[int, int], Config | None] = {
    # Qwen3-0.6B: qkv, o, gate_up, down, LM head
    (4096, 1024): (32, 128, 4, 5),
    (1024, 2048): (16, 512, 4, 3),
    (6144, 1024): (64, 128, 4, 5),
    (1024, 3072): (16, 512, 4, 4),
    (151936, 1024): (64, 128, 4, 4),
    # Qwen3-8B: qkv, o, gate_up, down, LM head
    (6144, 4096): (64, 256, 4, 4),
    (4096, 4096): (32, 512, 4, 4),
    (24576, 4096): (64, 128, 4, 3),
    (4096, 12288): (32, 512, 4, 4),
    (151936, 4096): (64, 256, 4, 3),
    # Qwen3-30B-A3B: qkv, o, router, LM head (`--model qwen3-30b-a3b`,
    # experiments/results/2026-12-02-h200-qwen3-moe.md)
    (5120, 2048): (64, 128, 4, 5),
    (2048, 4096): (16, 512, 4, 4),
    (128, 2048): (16, 512, 4, 3),
    (151936, 2048): (64, 128, 4, 5),
}
# The gated kernel's, per packed `[gate; up]` weight shape (2 x intermediate, hidden), the fastest
# `experiments.kernels.skinny_matmul_bench --gated` found
# (experiments/results/2026-12-01-h200-norm-fused-projections.md).
GATED_CONFIGS: dict[tuple[int, int], Config | None] = {
    (6144, 1024): (32, 128, 4, 5),
    (24576, 4096): (32, 128, 4, 3),
}
DEFAULT_CONFIG: Config = (32, 256, 4, 4)
# fp8 weights' own, per weight shape, where `skinny_matmul_bench --fp8 --move-bits --wide` found one faster
# than the bf16 table's on the H200: a strip of fp8 weight is half the bytes, so that the bf16 table's slices
# keep half the bytes in flight (experiments/results/2026-12-05-h200-fp8-aims-and-skinny-launches.md).
# Shapes not here take the bf16 tables'. (A MoE router is not among them: its weight stays bf16.)
FP8_CONFIGS: dict[tuple[int, int], Config] = {
    # Qwen3-30B-A3B: qkv, o
    (5120, 2048): (32, 256, 4, 4),
    (2048, 4096): (32, 256, 4, 4),  # split 2 ways (`SPLIT_K`)
}
# Batches of at most FMA_MAX_ROWS rows (a single stream's graph: one row and its padding) of a weight shape
# here, per (n, k, bytes of a weight element), run on the CUDA cores (`_fma_matmul_kernel`) with this
# configuration: a 16-row padded dot gives each warp eight columns and a chain of MMAs as long as the
# reduction, one warp a scheduler, which latency bounds. Swept by `skinny_matmul_bench --fma`.
FMA_MAX_ROWS = 2
FMA_CONFIGS: dict[tuple[int, int, int], Config] = {
    # Qwen3-30B-A3B's router, bf16 (experiments/results/2026-12-05-h100-fma-single-stream.md)
    (128, 2048, 2): (2, 2048, 8, 1),
}
# Programs a strip of output columns, per (n, k, bytes of a weight element), where more than one: narrow
# weights whose strips leave SMs idle, where `skinny_matmul_bench --splits` found a split faster and the
# engine's single stream agreed (experiments/results/2026-12-05-h100-moe-tiles-and-o-split.md).
SPLIT_K: dict[tuple[int, int, int], int] = {
    (2048, 4096, 1): 2,  # Qwen3-30B-A3B's o projection in fp8: 64 strips of 32 columns
}


def skinny_config(n: int, k: int, gated: bool = False, weight_bytes: int = 2) -> Config | None:
    """The kernel's configuration for an `n x k` weight of `weight_bytes` an element (packed `[gate; up]`
    where `gated`); None: leave this shape to cuBLAS."""
    if weight_bytes == 1 and not gated and (n, k) in FP8_CONFIGS:
        return FP8_CONFIGS[(n, k)]
    return (GATED_CONFIGS if gated else CONFIGS).get((n, k), DEFAULT_CONFIG)


def skinny_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    config: Config,
    gated: bool = False,
    weight_scale: torch.Tensor | None = None,
    split_k: int | None = None,
) -> torch.Tensor:
    """`x @ weight.T` for `x` of at most `MAX_ROWS` rows; both with contiguous rows. `gated`: `weight` is a
    packed `[gate; up]` and the result `silu(x @ gate.T) * (x @ up.T)`. `weight_scale`: `weight` is fp8
    and stands for `weight * weight_scale[:, None]` (`nvllm.ops.fp8`). `split_k`: programs a strip of
    output columns (not with `gated`); None: the tables decide: `SPLIT_K`'s for the weight, or, for at
    most `FMA_MAX_ROWS` rows of a shape `FMA_CONFIGS` names, `fma_matmul` at its configuration in place of
    `config`. Given a `split_k`, the tensor-core kernel runs at `config`."""
    num_rows, k = x.shape
    fma_config = FMA_CONFIGS.get((*weight.shape, weight.element_size()))
    if fma_config is not None and num_rows <= FMA_MAX_ROWS and not gated and split_k is None:
        return fma_matmul(x, weight, fma_config, weight_scale)
    if split_k is None:
        split_k = 1 if gated else SPLIT_K.get((*weight.shape, weight.element_size()), 1)
    assert num_rows <= MAX_ROWS and weight.shape[1] == k and x.stride(1) == 1 and weight.stride(1) == 1
    n = weight.shape[0] // 2 if gated else weight.shape[0]
    assert not gated or weight.shape[0] == 2 * n, "a gated weight packs two halves of equal size"
    block_n, block_k, num_warps, num_stages = config
    assert weight_scale is None or weight_scale.shape == (weight.shape[0],)
    assert split_k == 1 or not gated, "the gated kernel does not split its reduction"
    y = x.new_empty((num_rows, n))
    strips = triton.cdiv(n, block_n)
    partials = counters = y  # unread where split_k == 1
    if split_k > 1:
        partials, counters = split_workspace(x, strips, split_k, MAX_ROWS, block_n)
    _skinny_matmul_kernel[(strips, split_k)](
        x,
        weight,
        y,
        weight if weight_scale is None else weight_scale,
        partials,
        counters,
        num_rows,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        y.stride(0),
        BLOCK_M=MAX_ROWS,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GATED=gated,
        SCALED=weight_scale is not None,
        MOVE_BITS=moves_bits(weight, x),
        LINE=128 // weight.element_size(),
        SPLIT_K=split_k,
        num_warps=num_warps,
        num_stages=num_stages,
        **pdl_launch(x.device),
    )
    return y


def fma_matmul(
    x: torch.Tensor, weight: torch.Tensor, config: Config, weight_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """`x @ weight.T` for `x` of at most `FMA_MAX_ROWS` rows on the CUDA cores (`_fma_matmul_kernel`),
    `weight_scale` as in `skinny_matmul`."""
    num_rows, k = x.shape
    assert num_rows <= FMA_MAX_ROWS and weight.shape[1] == k and x.stride(1) == 1 and weight.stride(1) == 1
    n = weight.shape[0]
    block_n, block_k, num_warps, num_stages = config
    y = x.new_empty((num_rows, n))
    _fma_matmul_kernel[(triton.cdiv(n, block_n),)](
        x,
        weight,
        y,
        weight if weight_scale is None else weight_scale,
        num_rows,
        n,
        k,
        x.stride(0),
        weight.stride(0),
        y.stride(0),
        BLOCK_M=FMA_MAX_ROWS,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SCALED=weight_scale is not None,
        num_warps=num_warps,
        num_stages=num_stages,
        **pdl_launch(x.device),
    )
    return y
