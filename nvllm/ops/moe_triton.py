"""The experts of a mixture-of-experts layer as two Triton grouped matmuls over all experts at once.

The (token, choice) pairs are sorted by expert once per layer (`nvllm.ops.moe_align_triton`: no host
sync, static shapes, so the op is captured in CUDA graphs); a padding token's pairs, routed to no expert,
are in no run. Each expert's run of pairs is padded to a whole number of row tiles, and each tile knows its
expert; padding slots hold an index past the last pair and are masked. Then:
- gate/up: a tile of pairs' input rows against its expert's packed `[gate; up]` weight, `silu(gate) * up`
  in the epilogue, written at each pair's row of an `[pairs, I]` intermediate;
- down: the intermediate's rows against the expert's down weight, times the pair's routing weight in the
  epilogue, in fp32 (or bf16, `nvllm.ops.moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`) at each pair's row;
- the k pairs of a token summed in a fixed order (no atomics: the same inputs give the same bits) and
  rounded once, by a kernel of its own (`sum_pairs`), which adds no pair of no expert.
Experts in fp8 (`model.quantization=fp8`) are read as they are stored, a byte an element: each tile of weight
converted in registers to the activations' dtype (exactly: every e4m3 value is a bf16 value; by moving bits
where `nvllm.ops.e4m3_to_bf16` is enabled; gate/up's against fp16 rows where `GATE_UP_IN_FP16`), each
output column times its row's scale after the reduction, as the skinny kernel does for dense fp8 weights;
the activations are not quantized (quantized too, the matmuls of `nvllm.ops.moe_fp8_triton` run between the
sort and the sum).
Every kernel here is launched with programmatic dependent launch (`nvllm.ops.pdl`), as the kernels before and
after the layer's experts are: every one of them reads what the kernel before it wrote, so each waits first.
The row tile and the rest of each matmul's launch shape come from `nvllm.ops.moe_tiles` by the mean number
of pairs per expert."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.e4m3_to_bf16 import moves_bits, to_dot_dtype
from nvllm.ops.fp16_rows import fp16_rows
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_fp8_triton import fp8_activation_pair_outputs
from nvllm.ops.moe_tiles import GroupedMatmulConfig, matmul_config, pair_output_dtype, row_tile
from nvllm.ops.pdl import launch_next_kernel, overlap_prior_kernel, pdl_launch, wait_for_prior_kernel

# fp8 experts' gate/up on bf16 activations reads them as fp16 (`nvllm.ops.fp16_rows`: exact, a power of two
# per row), against which the GPU converts an e4m3 weight pair in one instruction. Exact, and no slower than
# moving bits at any batch, faster at some
# (experiments/results/2026-12-05-h100-fp16-rows-and-prefill-tiles.md).
GATE_UP_IN_FP16 = True

# The same for down's input, silu(gate) * up, converted to fp16 rows by a kernel of its own after gate/up
# has written all of it (a gate/up program holds only some of a row's columns, so none knows the row's
# scale). Off: on an H100 that kernel cost what down's shorter loop saved, level at decode batches and 2-3 %
# slower at prefill's (experiments/results/2026-12-06-h100-fp16-down-and-decode-shapes.md).
DOWN_IN_FP16 = False


@triton.jit
def _grouped_matmul_kernel(
    a_ptr,  # [rows, K]: row of pair p is p // A_ROW_DIVISOR (the token for gate/up, the pair for down)
    a_scale_ptr,  # [rows] where A_SCALED: a is fp16, each row's sums times its scale (`nvllm.ops.fp16_rows`)
    w_ptr,  # [E, N (x2 when GATED), K]
    w_scale_ptr,  # [E, N (x2 when GATED)] where SCALED: w is fp8, each output row of it times its scale
    out_ptr,  # [pairs, N]
    sorted_pairs_ptr,
    tile_expert_ptr,
    pair_weights_ptr,
    num_pairs,
    num_experts,
    N,
    K,
    stride_am,
    stride_we,
    stride_wn,
    stride_se,
    stride_om,
    A_ROW_DIVISOR: tl.constexpr,
    GATED: tl.constexpr,
    WEIGHTED: tl.constexpr,
    SCALED: tl.constexpr,
    A_SCALED: tl.constexpr,
    MOVE_BITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_prior_kernel(PDL)  # the tiles' experts and the input rows are the kernels' before
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile)
    if expert >= num_experts:
        return
    pairs = tl.load(sorted_pairs_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    valid = pairs < num_pairs
    rows = pairs // A_ROW_DIVISOR
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = columns < N
    w_expert = w_ptr + expert.to(tl.int64) * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_inside = ks < K
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :], valid[:, None] & k_inside[None, :], 0.0)
        w_mask = k_inside[:, None] & inside[None, :]
        # an fp8 weight converted to a's dtype, exactly (every e4m3 value is a bf16 value)
        w = tl.load(w_expert + columns[None, :] * stride_wn + ks[:, None], w_mask, 0.0)
        acc = tl.dot(a, to_dot_dtype(w, a.dtype, MOVE_BITS), acc)
        if GATED:
            w_up = tl.load(w_expert + (columns[None, :] + N) * stride_wn + ks[:, None], w_mask, 0.0)
            acc_up = tl.dot(a, to_dot_dtype(w_up, a.dtype, MOVE_BITS), acc_up)
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    if SCALED:  # a row's scale comes out of its dot products (nvllm.ops.fp8)
        scales = w_scale_ptr + expert.to(tl.int64) * stride_se + columns
        acc = acc * tl.load(scales, inside, 0.0)[None, :]
        if GATED:
            acc_up = acc_up * tl.load(scales + N, inside, 0.0)[None, :]
    if A_SCALED:  # an fp16 row's power of two back, exactly
        row_scale = tl.load(a_scale_ptr + rows, valid, 1.0)[:, None]
        acc = acc * row_scale
        if GATED:
            acc_up = acc_up * row_scale
    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    if WEIGHTED:
        acc = acc * tl.load(pair_weights_ptr + pairs, valid, 0.0).to(tl.float32)[:, None]
    out = out_ptr + pairs[:, None] * stride_om + columns[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), valid[:, None] & inside[None, :])


def grouped_matmul(
    a: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    pair_weights: torch.Tensor,
    block_m: int,
    divisor: int,
    gated: bool,
    weighted: bool,
    config: GroupedMatmulConfig,
    w_scale: torch.Tensor | None = None,
    a_scale: torch.Tensor | None = None,
) -> None:
    """One grouped matmul into `out` [pairs, N] over the tiles of `align_by_expert(..., block_m)`: pair
    p's row of `a` is p // `divisor`; `gated`: `w` packs [gate; up] and `out` gets silu(gate) * up;
    `weighted`: each row times its pair's routing weight. `w_scale` `[E, rows of w]`: `w` is fp8 and
    stands for `w * w_scale[..., None]` (`nvllm.ops.fp8`). `a_scale` `[rows of a]`: `a` is fp16 and stands
    for `a * a_scale[:, None]` (`nvllm.ops.fp16_rows`)."""
    num_pairs, n = out.shape
    assert w_scale is None or w_scale.shape == w.shape[:2]
    assert a_scale is None or a_scale.shape == a.shape[:1]
    grid = (tile_expert.numel(), triton.cdiv(n, config.block_n))
    _grouped_matmul_kernel[grid](
        a,
        a if a_scale is None else a_scale,
        w,
        w if w_scale is None else w_scale,
        out,
        sorted_pairs,
        tile_expert,
        pair_weights,
        num_pairs,
        w.shape[0],
        n,
        a.shape[1],
        a.stride(0),
        w.stride(0),
        w.stride(1),
        0 if w_scale is None else w_scale.stride(0),
        out.stride(0),
        A_ROW_DIVISOR=divisor,
        GATED=gated,
        WEIGHTED=weighted,
        SCALED=w_scale is not None,
        A_SCALED=a_scale is not None,
        MOVE_BITS=moves_bits(w, a),
        BLOCK_M=block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **pdl_launch(a.device),
    )


SUM_BLOCK = 1024  # columns per program of `sum_pairs`


@triton.jit
def _sum_pairs_kernel(
    pairs_ptr,
    ids_ptr,
    out_ptr,
    width,
    num_experts,
    TOP_K: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    overlap_prior_kernel(PDL)
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    total = tl.zeros((BLOCK,), tl.float32)
    for choice in tl.static_range(TOP_K):
        row = token * TOP_K + choice
        expert = tl.load(ids_ptr + row + tl.zeros((BLOCK,), tl.int32))  # one address: one read a warp
        routed = inside & (expert < num_experts)  # a pair of no expert has no row written
        total += tl.load(pairs_ptr + row * width + columns, mask=routed, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * width + columns, total.to(out_ptr.dtype.element_ty), mask=inside)


def sum_pairs(
    pair_outputs: torch.Tensor, topk_ids: torch.Tensor, num_experts: int, dtype: torch.dtype
) -> torch.Tensor:
    """Each token's `top_k` consecutive rows of the contiguous `pair_outputs` `[T * top_k, H]` (fp32, or the
    activations' dtype where `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`) summed in fp32 in order (choice 0 first)
    and rounded once to `dtype`: `[T, H]`. The pairs `topk_ids` `[T, top_k]` sends to no expert
    (`num_experts`: a padding token's, `nvllm.ops.moe_routing.padding_to_no_expert`) add nothing: nobody wrote
    their rows."""
    num_pairs, width = pair_outputs.shape
    top_k = topk_ids.shape[1]
    assert topk_ids.numel() == num_pairs, (topk_ids.shape, pair_outputs.shape)
    out = torch.empty((num_pairs // top_k, width), dtype=dtype, device=pair_outputs.device)
    if num_pairs:
        _sum_pairs_kernel[(num_pairs // top_k, triton.cdiv(width, SUM_BLOCK))](
            pair_outputs,
            topk_ids.contiguous(),
            out,
            width,
            num_experts,
            TOP_K=top_k,
            BLOCK=SUM_BLOCK,
            num_warps=4,
            **pdl_launch(pair_outputs.device),
        )
    return out


def grouped_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`nvllm.ops.moe_ops.experts_reference`'s result from the two grouped matmuls."""
    num_tokens, top_k = topk_ids.shape
    num_experts = gate_up.shape[0]
    if num_tokens * top_k == 0:
        return torch.zeros_like(x)
    block_m = row_tile(num_tokens * top_k, num_experts, quantize_activations)
    sorted_pairs, tile_expert = align_by_expert(topk_ids, num_experts, block_m)
    return aligned_experts(
        x,
        gate_up,
        down,
        topk_weights,
        topk_ids,
        sorted_pairs,
        tile_expert,
        block_m,
        gate_up_scale,
        down_scale,
        quantize_activations,
    )


def aligned_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    block_m: int,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """The two grouped matmuls over pairs already sorted by expert (`align_by_expert(topk_ids, E, block_m)`'s
    layout), the k pairs of each token summed; fp8 experts with their scales (`nvllm.ops.moe_ops`), with
    `quantize_activations` on fp8 activations (`nvllm.ops.moe_fp8_triton`)."""
    pair_outputs = (
        fp8_activation_pair_outputs if quantize_activations else unquantized_activation_pair_outputs
    )
    weighted = pair_outputs(
        x, gate_up, down, topk_weights, sorted_pairs, tile_expert, block_m, gate_up_scale, down_scale
    )
    return sum_pairs(weighted, topk_ids, gate_up.shape[0], x.dtype)


def matmul_input(a: torch.Tensor, fp8: bool, in_fp16: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`a` and its row scales as a grouped matmul reads it: fp16 rows (`nvllm.ops.fp16_rows`) where the
    experts are `fp8`, the matmul's switch (`in_fp16`) is on and `a` is bf16; else `a` as it is, no scales."""
    if in_fp16 and fp8 and a.dtype == torch.bfloat16:
        return fp16_rows(a)
    return a, None


def unquantized_activation_pair_outputs(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
    block_m: int,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Each (token, choice) pair's output of the experts on `x` as it is (bf16 and fp8 experts alike), times
    its routing weight, `[pairs, H]` in fp32 (in `x`'s dtype where `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`).
    Where `GATE_UP_IN_FP16`, fp8 experts' gate/up reads bf16 `x` as fp16 rows with a scale each, exactly
    (`nvllm.ops.fp16_rows`); where `DOWN_IN_FP16`, down reads gate/up's output so too."""
    num_tokens, top_k = topk_weights.shape
    num_experts, intermediate = gate_up.shape[0], down.shape[2]
    num_pairs = num_tokens * top_k
    x, gate_up, down = x.contiguous(), gate_up.contiguous(), down.contiguous()
    pair_weights = topk_weights.flatten().contiguous()
    activated = x.new_empty((num_pairs, intermediate))
    tiles = (sorted_pairs, tile_expert, pair_weights, block_m)
    fp8 = gate_up_scale is not None
    gate_up_input, input_scale = matmul_input(x, fp8, GATE_UP_IN_FP16)
    gate_up_config = matmul_config(num_pairs, num_experts, gated=True, fp8=fp8)
    grouped_matmul(
        gate_up_input,
        gate_up,
        activated,
        *tiles,
        divisor=top_k,
        gated=True,
        weighted=False,
        config=gate_up_config,
        w_scale=gate_up_scale,
        a_scale=input_scale,
    )
    weighted = torch.empty((num_pairs, x.shape[1]), dtype=pair_output_dtype(x.dtype), device=x.device)
    down_input, activated_scale = matmul_input(activated, fp8, DOWN_IN_FP16)
    down_config = matmul_config(num_pairs, num_experts, gated=False, fp8=fp8)
    grouped_matmul(
        down_input,
        down,
        weighted,
        *tiles,
        divisor=1,
        gated=False,
        weighted=True,
        config=down_config,
        w_scale=down_scale,
        a_scale=activated_scale,
    )
    return weighted
