"""A batch's mixture-of-experts routing as one Triton kernel for batches of any size: from the router's
logits `[T, E]` to `nvllm.ops.moe_routing.route_step`'s weights (the logits' dtype) and experts (int64),
the padding tokens sent to no expert. `align_by_expert` then sorts the pairs by expert: two launches where
eager torch takes several small ones (inductor does not compile inside the op).

One program per block of tokens, each holding its tokens' logits; the router's rule is
`moe_topk_triton`'s."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.moe_topk_triton import route_block, store_routing
from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

# A program's tile of logits: many programs for the SMs at a decode batch of 256 rows (16 of a 128-expert
# router), each tile held in registers at 4 warps.
ROUTING_BLOCK_LOGITS = 2048


def routing_block_tokens(num_experts: int) -> int:
    """The tokens a program routes: as many as fill `ROUTING_BLOCK_LOGITS` logits, at least one."""
    return max(1, ROUTING_BLOCK_LOGITS // triton.next_power_of_2(num_experts))


@triton.jit
def _route_tokens_kernel(
    logits_ptr,
    padding_ptr,
    weights_ptr,
    ids_ptr,
    num_tokens,
    stride_logits,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    PDL: tl.constexpr,
):
    overlap_prior_kernel(PDL)
    first_token = tl.program_id(0) * BLOCK_T
    topk_weights, topk_ids = route_block(
        logits_ptr,
        stride_logits,
        padding_ptr,
        first_token,
        num_tokens,
        BLOCK_T,
        NUM_EXPERTS,
        EXPERTS_POW2,
        TOP_K,
        TOP_K_POW2,
        RENORMALIZE,
        HAS_PADDING,
    )
    store_routing(
        weights_ptr, ids_ptr, topk_weights, topk_ids, first_token, num_tokens, BLOCK_T, TOP_K, TOP_K_POW2
    )


def route_tokens(
    router_logits: torch.Tensor, padding: torch.Tensor | None, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`route_step(router_logits, padding, top_k, renormalize)`'s weights `[T, top_k]` (the logits'
    dtype) and experts (int64) from one kernel launch, for a batch of any size."""
    num_tokens, num_experts = router_logits.shape
    if not 0 < top_k <= num_experts:
        raise ValueError(f"top_k must be between 1 and the {num_experts} experts, got {top_k}")
    device = router_logits.device
    weights = torch.empty((num_tokens, top_k), dtype=router_logits.dtype, device=device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int64, device=device)
    if num_tokens == 0:
        return weights, ids
    logits = router_logits.contiguous()
    experts_pow2 = triton.next_power_of_2(num_experts)
    block_tokens = routing_block_tokens(num_experts)
    _route_tokens_kernel[(triton.cdiv(num_tokens, block_tokens),)](
        logits,
        logits if padding is None else padding.view(torch.uint8),
        weights,
        ids,
        num_tokens,
        logits.stride(0),
        NUM_EXPERTS=num_experts,
        EXPERTS_POW2=experts_pow2,
        TOP_K=top_k,
        TOP_K_POW2=triton.next_power_of_2(top_k),
        BLOCK_T=block_tokens,
        RENORMALIZE=renormalize,
        HAS_PADDING=padding is not None,
        num_warps=4 if block_tokens * experts_pow2 <= 2048 else 8,
        **pdl_launch(device),
    )
    return weights, ids
