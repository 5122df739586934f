"""A small batch's mixture-of-experts routing as one Triton kernel: from the router's logits `[T, E]` to
what `nvllm.ops.moe_routing.route_step` and `nvllm.ops.moe_align_triton.align_by_expert` produce together
(each token's weights and experts, the padding tokens sent to no expert, and the pairs sorted by expert
into row tiles, in the same layout and capacity). Separately they are several launches, each of a
few floats, that cost a decode step more in latency than in work.

One program per expert, as `align_by_expert`'s kernel: each routes every token (the whole `[T, E]` tile of
logits sits in its registers, so batches are limited to `MAX_FUSED_LOGITS` logits), then writes its own
expert's run of pairs; the first program writes the weights and experts. The router's rule is
`moe_topk_triton`'s. Larger batches are routed by `moe_route_tokens_triton` (a program per block of
tokens), then sorted by `align_by_expert`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.moe_align_triton import (
    align_by_expert,
    empty_tiles,
    pad_runs_and_tile_experts,
    routed_counts,
)
from nvllm.ops.moe_route_tokens_triton import route_tokens
from nvllm.ops.moe_skinny_triton import skinny_experts, takes_skinny_experts
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.moe_topk_triton import route_block, store_routing
from nvllm.ops.moe_triton import aligned_experts
from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

# 64 tokens of a 128-expert router (Qwen3-MoE's): a decode batch. The tile is held a few times over (logits,
# probabilities, the candidates left), which at 8 warps is about a hundred registers a thread; larger
# batches are routed a block of tokens a program, then sorted by expert by a second kernel.
MAX_FUSED_LOGITS = 8192
# A batch the skinny experts take is routed inside their gate/up kernel (each program routes its pair's
# token from the logits before its first load), or, False, by `route_tokens` first (one launch, chained to
# theirs), the experts then given the routing. Either way a single stream was slower than with inductor's
# routing (`model.moe_routing_kernel=false`, the default): inside the kernels on an H100
# (experiments/results/2026-12-05-h100-fma-single-stream.md), first on an H200
# (experiments/results/2026-12-05-h200-moe-aims.md).
SKINNY_ROUTES_IN_KERNELS = True


def fits_fused_routing(num_tokens: int, num_experts: int) -> bool:
    """Whether a batch of `num_tokens` routed over `num_experts` experts takes the fused kernel."""
    return 0 < num_tokens and triton.next_power_of_2(num_tokens) * triton.next_power_of_2(num_experts) <= (
        MAX_FUSED_LOGITS
    )


@triton.jit
def _route_and_align_kernel(
    logits_ptr,
    padding_ptr,
    weights_ptr,
    ids_ptr,
    sorted_pairs_ptr,
    tile_expert_ptr,
    num_tokens,
    stride_logits,
    capacity,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    TOKENS_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    overlap_prior_kernel(PDL)
    expert = tl.program_id(0)
    tokens = tl.arange(0, TOKENS_POW2)
    choices = tl.arange(0, TOP_K_POW2)
    real = tokens < num_tokens
    topk_weights, topk_ids = route_block(
        logits_ptr,
        stride_logits,
        padding_ptr,
        0,
        num_tokens,
        TOKENS_POW2,
        NUM_EXPERTS,
        EXPERTS_POW2,
        TOP_K,
        TOP_K_POW2,
        RENORMALIZE,
        HAS_PADDING,
    )
    chosen = real[:, None] & (choices < TOP_K)[None, :]
    pairs = tokens[:, None] * TOP_K + choices[None, :]
    if expert == 0:
        store_routing(
            weights_ptr, ids_ptr, topk_weights, topk_ids, 0, num_tokens, TOKENS_POW2, TOP_K, TOP_K_POW2
        )

    num_pairs = num_tokens * TOP_K
    routed = chosen & (topk_ids < NUM_EXPERTS)  # not a padding token's pair, which goes to no expert
    flat_ids = tl.reshape(topk_ids, (TOKENS_POW2 * TOP_K_POW2,))
    counts = routed_counts(flat_ids, tl.reshape(routed, (TOKENS_POW2 * TOP_K_POW2,)), EXPERTS_POW2)
    run_start = pad_runs_and_tile_experts(
        sorted_pairs_ptr, tile_expert_ptr, counts, expert, num_pairs, capacity, NUM_EXPERTS, BLOCK_M, CHUNK
    )
    # a token chooses an expert at most once, so this expert's pairs are in token order: a token's rank in
    # the run is the number of earlier tokens that chose it
    mine = chosen & (topk_ids == expert)
    has_pair = tl.sum(mine.to(tl.int32), 1)
    pair = tl.sum(tl.where(mine, pairs, 0), 1)
    rank = tl.cumsum(has_pair, 0) - 1
    tl.store(sorted_pairs_ptr + run_start + rank, pair, mask=has_pair != 0)


def route_and_align(
    router_logits: torch.Tensor,
    padding: torch.Tensor | None,
    top_k: int,
    renormalize: bool,
    block_m: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`route_step(router_logits, padding, top_k, renormalize)`'s weights and ids, and
    `align_by_expert(ids, E, block_m)`'s sorted pairs and tile experts, from one kernel launch. For batches
    that `fits_fused_routing`."""
    num_tokens, num_experts = router_logits.shape
    if not fits_fused_routing(num_tokens, num_experts):
        raise ValueError(
            f"fused routing holds at most {MAX_FUSED_LOGITS} logits: {num_tokens} tokens of {num_experts} "
            "experts do not fit"
        )
    device = router_logits.device
    weights = torch.empty((num_tokens, top_k), dtype=router_logits.dtype, device=device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int64, device=device)
    sorted_pairs, tile_expert = empty_tiles(num_tokens * top_k, num_experts, block_m, device)
    logits = router_logits.contiguous()
    tokens_pow2, experts_pow2 = triton.next_power_of_2(num_tokens), triton.next_power_of_2(num_experts)
    _route_and_align_kernel[(num_experts,)](
        logits,
        logits if padding is None else padding.view(torch.uint8),
        weights,
        ids,
        sorted_pairs,
        tile_expert,
        num_tokens,
        logits.stride(0),
        sorted_pairs.numel(),
        NUM_EXPERTS=num_experts,
        EXPERTS_POW2=experts_pow2,
        TOP_K=top_k,
        TOP_K_POW2=triton.next_power_of_2(top_k),
        TOKENS_POW2=tokens_pow2,
        BLOCK_M=block_m,
        RENORMALIZE=renormalize,
        HAS_PADDING=padding is not None,
        CHUNK=1024,
        num_warps=4 if tokens_pow2 * experts_pow2 <= 2048 else 8,
        **pdl_launch(device),
    )
    return weights, ids, sorted_pairs, tile_expert


def routed_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    router_logits: torch.Tensor,
    padding: torch.Tensor | None,
    top_k: int,
    renormalize: bool,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`nvllm::routed_experts` on CUDA: a few tokens through the skinny experts
    (`nvllm.ops.moe_skinny_triton`), routed inside their kernels or first (`SKINNY_ROUTES_IN_KERNELS`); else
    the batch routed by the fused kernel where it fits, or by `route_tokens` and `align_by_expert`, then the
    grouped matmuls (on fp8 experts with their scales, and with `quantize_activations` on fp8
    activations)."""
    num_tokens, num_experts = router_logits.shape
    if num_tokens == 0:
        return torch.zeros_like(x)
    if takes_skinny_experts(num_tokens, gate_up.element_size(), quantize_activations):
        scales = dict(gate_up_scale=gate_up_scale, down_scale=down_scale)
        if SKINNY_ROUTES_IN_KERNELS:
            routing = dict(router_logits=router_logits, padding=padding, renormalize=renormalize)
            return skinny_experts(x, gate_up, down, top_k, **routing, **scales)
        routed = route_tokens(router_logits, padding, top_k, renormalize)
        return skinny_experts(x, gate_up, down, top_k, routing=routed, **scales)
    block_m = row_tile(num_tokens * top_k, num_experts, quantize_activations)
    if fits_fused_routing(num_tokens, num_experts):
        weights, ids, sorted_pairs, tile_expert = route_and_align(
            router_logits, padding, top_k, renormalize, block_m
        )
    else:
        weights, ids = route_tokens(router_logits, padding, top_k, renormalize)
        sorted_pairs, tile_expert = align_by_expert(ids, num_experts, block_m)
    return aligned_experts(
        x,
        gate_up,
        down,
        weights,
        ids,
        sorted_pairs,
        tile_expert,
        block_m,
        gate_up_scale,
        down_scale,
        quantize_activations,
    )
