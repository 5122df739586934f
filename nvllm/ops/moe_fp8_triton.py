"""fp8 experts multiplying fp8 activations on the fp8 tensor cores (`model.fp8_activations`): the grouped
matmuls of `nvllm.ops.moe_triton` with nothing converted in their loops.

`nvllm.ops.moe_triton` multiplies bf16 activations by fp8 weights, so every weight element it reads is
converted to bf16 before its MMA: more work in the loop than the bytes it reads, at every batch size
(experiments/results/2026-12-04-cpu-fp8-weight-conversion.md). Here both operands are e4m3:
- the layer's input is quantized a scale per token (`quantize_tokens`, one kernel, as the dense fp8 matmuls'
  activations are);
- the intermediate, `silu(gate) * up`, is quantized a scale per pair (`moe_tiles.FP8_INTERMEDIATE_PER_ROW`,
  the default): gate/up writes it in bf16, `quantize_tokens` quantizes each row once all its columns are
  written, and down accumulates in its MMAs like gate/up, its rows' scales applied after the loop;
- or, with that setting off, a scale per pair and group of `moe_tiles.FP8_INTERMEDIATE_GROUP` columns by the
  gate/up kernel's epilogue (a program holds one group or several: its `block_n`, a multiple of the group),
  and the down kernel multiplies each group's dot products by the group's scales as it accumulates (fp32,
  on the CUDA cores), waiting on its MMAs at every group. Down was then the slower half of a prefill
  step's experts; a row's scale removes those waits, its rounding coarser
  (experiments/results/2026-12-06-h100-intermediate-per-row.md);
- the tensor cores accumulate each matmul's products over its whole loop, in their fewer bits than fp32
  (or each reduction slice's sums are added in fp32, where `moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32`);
- each weight row's scale and each pair's routing weight are applied after down's loop;
- the k pairs of a token are summed as before (`nvllm.ops.moe_triton.sum_pairs`).

Each program computes its tile transposed, `W · Aᵀ`: rows of weight by pairs. Hopper's fp8 MMA
(`wgmma`) takes 64 rows of its first operand at a time and as few as 8 of its second, and a decode batch
gives an expert a few pairs: the weight's rows fill the 64, the pairs the few. Both operands then come from
shared memory as stored, e4m3 with the reduction dimension contiguous, which is the layout fp8 MMA needs.

The sort by expert is `nvllm.ops.moe_triton`'s, the launch shapes `nvllm.ops.moe_tiles`'
(`fp8_activation_table`); the torch reference is `nvllm.ops.moe_ops.quantized_activations_expert`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops import moe_tiles
from nvllm.ops.fp8 import FP8, FP8_MAX
from nvllm.ops.moe_tiles import GroupedMatmulConfig, fp8_activation_config, pair_output_dtype
from nvllm.ops.pdl import launch_next_kernel, overlap_prior_kernel, pdl_launch, wait_for_prior_kernel

E4M3_MAX = tl.constexpr(FP8_MAX)


@triton.jit
def round_to_e4m3(x):
    """fp32 `x` (|x| <= 448) rounded to the nearest e4m3 value, ties to even, in fp32 arithmetic: its
    conversion to e4m3 is then exact. The GPU's conversion rounds so too; Triton's interpreter truncates
    where rounding carries into the exponent, so kernels round first and the CPU tests see the GPU's
    values."""
    bits = x.to(tl.int32, bitcast=True)
    exponent = ((bits >> 23) & 0xFF) - 127
    # e4m3 has 3 mantissa bits; below its smallest normal exponent (-6) the step stays 2^-9. The step and its
    # inverse are powers of two, built from their exponent bits, so that every operation below is exact
    # but the one rounding
    step_exponent = tl.maximum(exponent, -6) - 3
    step = ((step_exponent + 127) << 23).to(tl.float32, bitcast=True)
    inverse_step = ((127 - step_exponent) << 23).to(tl.float32, bitcast=True)
    # adding and subtracting 2^23 rounds a non-negative float below 2^23 to an integer, ties to even; the
    # sign goes back on after (so that a negative value that rounds to zero is -0, as converted)
    magnitude = ((tl.abs(x) * inverse_step + 8388608.0) - 8388608.0) * step
    return (magnitude.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def round_to_bf16(x):
    """fp32 `x` rounded to the nearest bf16 value, ties to even, in integer arithmetic on its bits: its
    conversion to bf16 is then exact (the GPU's rounds so too; Triton's interpreter truncates). A NaN is
    left as it is: the addition would carry some of them into the sign, or to zero."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return tl.where(x != x, x, rounded.to(tl.float32, bitcast=True))


@triton.jit
def quantized_e4m3(x, scale):
    """`x / scale` in e4m3, `scale` chosen so that it is within e4m3's range."""
    return round_to_e4m3(tl.clamp(tl.math.div_rn(x, scale), -E4M3_MAX, E4M3_MAX)).to(tl.float8e4nv)


@triton.jit
def _quantize_tokens_kernel(
    x_ptr, q_ptr, scale_ptr, width, stride_x, stride_q, BLOCK: tl.constexpr, PDL: tl.constexpr
):
    overlap_prior_kernel(PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    inside = columns < width
    x = tl.load(x_ptr + row * stride_x + columns, inside, 0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=0)
    scale = tl.where(amax > 0, tl.math.div_rn(amax, E4M3_MAX), 1.0)
    tl.store(q_ptr + row * stride_q + columns, quantized_e4m3(x, scale), inside)
    tl.store(scale_ptr + row, scale)


def quantize_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`nvllm.ops.fp8.quantize_tokens(x)` of activations `[tokens, width]`, one kernel: `(q, scale)`."""
    rows, width = x.shape
    q = torch.empty((rows, width), dtype=FP8, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        _quantize_tokens_kernel[(rows,)](
            x,
            q,
            scale,
            width,
            x.stride(0),
            q.stride(0),
            BLOCK=triton.next_power_of_2(width),
            num_warps=4,
            **pdl_launch(x.device),
        )
    return q, scale


@triton.jit
def _grouped_fp8_matmul_kernel(
    a_ptr,  # e4m3. GATED: the tokens' rows [T, K]; else the intermediate's, a row a slot [slots, K]
    # fp32. GATED: a token's scale [T]; else a slot's a group of GROUP columns [groups, slots], or a slot's
    # one scale [slots] where ROW_SCALES
    a_scale_ptr,
    w_ptr,  # [E, N (x2 when GATED), K] e4m3
    w_scale_ptr,  # [E, N (x2 when GATED)] fp32
    # GATED: silu(gate) * up, a row a slot [slots, N], e4m3 (bf16 where ROW_SCALES: quantized after); else a
    # row a pair [pairs, N] fp32
    out_ptr,
    out_scale_ptr,  # GATED and not ROW_SCALES: a slot's scale per group of GROUP columns [groups, slots] fp32
    sorted_pairs_ptr,
    tile_expert_ptr,
    pair_weights_ptr,
    num_pairs,
    num_experts,
    N,
    K,
    stride_am,
    stride_as,
    stride_we,
    stride_wn,
    stride_se,
    stride_om,
    stride_os,
    TOP_K: tl.constexpr,
    GATED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,
    ROW_SCALES: tl.constexpr,
    PROMOTED: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_prior_kernel(PDL)  # the tiles' experts and the input rows are the kernels' before
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile)
    if expert >= num_experts:
        return
    # the tile's slots of the sorted pairs; the intermediate is stored a row a slot, so that the down
    # matmul reads its tile's rows in one piece
    slots = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_pairs_ptr + slots).to(tl.int64)
    valid = pairs < num_pairs
    # every row a tile reads is in bounds, a padding slot's too (the last pair's token, or its own unwritten
    # row): its column of the products is never stored, so the loads need no mask of the pairs
    rows = tl.minimum(pairs, num_pairs - 1) // TOP_K if GATED else slots
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = columns < N
    w_expert = w_ptr + expert.to(tl.int64) * stride_we
    # transposed, weight rows by pairs: the weight fills the MMA's 64-row operand (module docstring)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_inside = ks < K
        a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :]
        a = tl.trans(tl.load(a_tile, k_inside[None, :], 0.0))
        w_mask = inside[:, None] & k_inside[None, :]
        w = tl.load(w_expert + columns[:, None] * stride_wn + ks[None, :], w_mask, 0.0)
        if GATED:
            w_up = tl.load(w_expert + (columns[:, None] + N) * stride_wn + ks[None, :], w_mask, 0.0)
            # each slice's products added to the sum in fp32 where PROMOTED (`moe_tiles.
            # FP8_ACTIVATION_SUMS_IN_FP32`); else the tensor cores accumulate over the whole loop
            acc = tl.dot(w, a, acc, max_num_imprecise_acc=BLOCK_K if PROMOTED else None)
            acc_up = tl.dot(w_up, a, acc_up, max_num_imprecise_acc=BLOCK_K if PROMOTED else None)
        elif ROW_SCALES:  # a slot's one scale, applied after the loop
            acc = tl.dot(w, a, acc, max_num_imprecise_acc=BLOCK_K if PROMOTED else None)
        else:  # each group's products scaled as they are added
            group_scale = tl.load(a_scale_ptr + (k0 // GROUP) * stride_as + slots)
            acc += tl.dot(w, a) * group_scale[None, :]
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    # a weight row's scale, and a token's, come out of the dot products (nvllm.ops.fp8)
    scales = w_scale_ptr + expert.to(tl.int64) * stride_se + columns
    acc = acc * tl.load(scales, inside, 0.0)[:, None]
    if GATED:  # silu(gate) * up
        token_scale = tl.load(a_scale_ptr + rows)[None, :]
        acc_up = acc_up * tl.load(scales + N, inside, 0.0)[:, None] * token_scale
        acc = acc * token_scale
        activated = acc * tl.sigmoid(acc) * acc_up
        out = out_ptr + slots[None, :] * stride_om + columns[:, None]
        if ROW_SCALES:  # quantized by a kernel of its own, once the row's every column is written
            tl.store(out, round_to_bf16(activated).to(tl.bfloat16), valid[None, :] & inside[:, None])
        else:  # quantized a scale per slot and group of the tile's columns
            activated = tl.reshape(activated, (BLOCK_N // GROUP, GROUP, BLOCK_M))
            amax = tl.max(tl.abs(activated), axis=1)
            scale = tl.where(amax > 0, tl.math.div_rn(amax, E4M3_MAX), 1.0)
            quantized = tl.reshape(quantized_e4m3(activated, scale[:, None, :]), (BLOCK_N, BLOCK_M))
            tl.store(out, quantized, valid[None, :] & inside[:, None])
            groups = tl.program_id(1) * (BLOCK_N // GROUP) + tl.arange(0, BLOCK_N // GROUP)
            # a group wholly past the intermediate's end has no columns, and no scale to store
            out_scale = out_scale_ptr + groups[:, None] * stride_os + slots[None, :]
            tl.store(out_scale, scale, valid[None, :] & (groups * GROUP < N)[:, None])
    else:  # the slot's scale where ROW_SCALES (a padding slot's too: its column is not stored), the pair's
        # routing weight
        if ROW_SCALES:
            acc = acc * tl.load(a_scale_ptr + slots)[None, :]
        acc = acc * tl.load(pair_weights_ptr + pairs, valid, 0.0).to(tl.float32)[None, :]
        out = out_ptr + pairs[None, :] * stride_om + columns[:, None]
        if out_ptr.dtype.element_ty == tl.bfloat16:  # `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`
            tl.store(out, round_to_bf16(acc).to(tl.bfloat16), valid[None, :] & inside[:, None])
        else:
            tl.store(out, acc.to(out_ptr.dtype.element_ty), valid[None, :] & inside[:, None])


def grouped_fp8_matmul(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    out: torch.Tensor,
    out_scale: torch.Tensor | None,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    pair_weights: torch.Tensor,
    block_m: int,
    top_k: int,
    config: GroupedMatmulConfig,
) -> None:
    """One grouped matmul over the tiles of `align_by_expert(..., block_m)`, both operands e4m3, `w`
    `[E, N or 2N, K]` with a scale per row.
    Gate/up, where `w` packs [gate; up] (twice `out`'s columns): `a` is the tokens' rows `[T, K]` with a
    scale each (`a_scale` `[T]`), and `out` `[slots, N]` gets silu(gate) * up a row per slot of
    `sorted_pairs`: in e4m3 with a scale per group of `FP8_INTERMEDIATE_GROUP` columns and slot
    (`out_scale` `[groups, slots]`; `config.block_n` a multiple of the group), or in bf16 where `out` is
    (`out_scale` None: quantized a scale per slot after).
    Down: `a` and `a_scale` are the quantized intermediate, a scale per group and slot (`config.block_k` is
    the group: a step of the loop scales one group) or per slot (`[slots]`), and `out` `[pairs, N]` gets
    each pair's row times its routing weight, in `out`'s dtype (fp32, or the activations' where
    `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`; `out_scale` None)."""
    n = out.shape[1]
    gated = w.shape[1] == 2 * n
    assert a.dtype == w.dtype == FP8 and w_scale.shape == w.shape[:2]
    group = moe_tiles.FP8_INTERMEDIATE_GROUP
    if gated:
        row_scales = out_scale is None
        if row_scales:
            assert out.dtype == torch.bfloat16, f"gate/up's output without scales is bf16, not {out.dtype}"
        else:
            assert out.dtype == FP8 and out_scale.shape == (triton.cdiv(n, group), sorted_pairs.numel())
            assert config.block_n % group == 0, f"gate/up's block_n {config.block_n}: no multiple of {group}"
    else:
        assert out_scale is None and out.dtype in (torch.float32, torch.bfloat16, torch.float16), out.dtype
        row_scales = a_scale.dim() == 1
        if row_scales:
            assert a_scale.shape == sorted_pairs.shape
        else:
            assert a_scale.shape == (triton.cdiv(a.shape[1], group), sorted_pairs.numel())
            assert config.block_k == group, f"down's block_k {config.block_k}: not the group, {group}"
    grid = (tile_expert.numel(), triton.cdiv(n, config.block_n))
    _grouped_fp8_matmul_kernel[grid](
        a,
        a_scale,
        w,
        w_scale,
        out,
        a_scale if out_scale is None else out_scale,
        sorted_pairs,
        tile_expert,
        pair_weights,
        pair_weights.numel(),
        w.shape[0],
        n,
        a.shape[1],
        a.stride(0),
        a_scale.stride(0),
        w.stride(0),
        w.stride(1),
        w_scale.stride(0),
        out.stride(0),
        0 if out_scale is None else out_scale.stride(0),
        TOP_K=top_k,
        GATED=gated,
        BLOCK_M=block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP=group,
        ROW_SCALES=row_scales,
        PROMOTED=moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **pdl_launch(a.device),
    )


def fp8_activation_pair_outputs(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    block_m: int,
    gate_up_scale: torch.Tensor,
    down_scale: torch.Tensor,
) -> torch.Tensor:
    """Each (token, choice) pair's output of fp8 experts on quantized activations (the module docstring),
    times its routing weight, `[pairs, H]` in fp32 (in `x`'s dtype where
    `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`): what `nvllm.ops.moe_triton.aligned_experts` sums into
    `experts_reference(..., quantize_activations=True)`'s result."""
    num_tokens, top_k = topk_weights.shape
    num_experts, intermediate = gate_up.shape[0], down.shape[2]
    num_pairs = num_tokens * top_k
    gate_up, down = gate_up.contiguous(), down.contiguous()
    tiles = (sorted_pairs, tile_expert, topk_weights.flatten().contiguous(), block_m)
    x_q, x_scale = quantize_tokens(x.contiguous())
    gate_up_config = fp8_activation_config(num_pairs, num_experts, gated=True)
    down_config = fp8_activation_config(num_pairs, num_experts, gated=False)
    slots = sorted_pairs.numel()
    if moe_tiles.FP8_INTERMEDIATE_PER_ROW:
        activated = torch.empty((slots, intermediate), dtype=torch.bfloat16, device=x.device)
        gate_up_operands = (x_q, x_scale, gate_up, gate_up_scale, activated, None)
        grouped_fp8_matmul(*gate_up_operands, *tiles, top_k, gate_up_config)
        activated, activated_scale = quantize_tokens(activated)
    else:
        activated = torch.empty((slots, intermediate), dtype=FP8, device=x.device)
        groups = triton.cdiv(intermediate, moe_tiles.FP8_INTERMEDIATE_GROUP)
        activated_scale = torch.empty((groups, slots), dtype=torch.float32, device=x.device)
        grouped_fp8_matmul(
            x_q, x_scale, gate_up, gate_up_scale, activated, activated_scale, *tiles, top_k, gate_up_config
        )
    weighted = torch.empty((num_pairs, x.shape[1]), dtype=pair_output_dtype(x.dtype), device=x.device)
    grouped_fp8_matmul(
        activated, activated_scale, down, down_scale, weighted, None, *tiles, top_k, down_config
    )
    return weighted
