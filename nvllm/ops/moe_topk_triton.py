"""The router's rule in Triton, for the routing kernels (`moe_route_triton`, `moe_route_tokens_triton`): a
tile of tokens' softmax, top-k and renormalisation, and the padding tokens' rule, as `nvllm.ops.moe_routing`
states them in torch.

Top-k is k passes of a row maximum taking the lowest index among equal probabilities, the rule of `route`'s
stable sort; a NaN probability counts as larger than every number, as in that sort. The softmax and the
renormalisation divide rounding to nearest (as eager torch; inductor's Triton division is an approximation
unless asked), and the renormalising sum adds the k weights in the reduction's order, not necessarily
torch's: a weight may differ from `route`'s in its last bit."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def route_rows(
    logits_ptr,
    stride_logits,
    first_token,
    num_tokens,
    BLOCK_T: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    """The fp32 weights and int32 experts `[BLOCK_T, TOP_K_POW2]` of the rows from `first_token` on (those
    at or past `num_tokens` get finite values, never to be stored)."""
    tokens = first_token + tl.arange(0, BLOCK_T)
    experts = tl.arange(0, EXPERTS_POW2)
    choices = tl.arange(0, TOP_K_POW2)
    real = tokens < num_tokens
    is_expert = experts < NUM_EXPERTS
    logits = tl.load(
        logits_ptr + tokens[:, None] * stride_logits + experts[None, :],
        real[:, None] & is_expert[None, :],
        float("-inf"),
    ).to(tl.float32)
    logits = tl.where(real[:, None], logits, 0.0)
    exps = tl.exp(logits - tl.max(logits, 1)[:, None])
    probabilities = tl.div_rn(exps, tl.sum(exps, 1)[:, None])
    # taken experts and the power-of-two padding become -1, below every probability; NaN above all
    candidates = tl.where(probabilities != probabilities, 2.0, probabilities)
    candidates = tl.where(is_expert[None, :], candidates, -1.0)
    topk_weights = tl.zeros((BLOCK_T, TOP_K_POW2), tl.float32)
    topk_ids = tl.zeros((BLOCK_T, TOP_K_POW2), tl.int32)
    for choice in tl.static_range(TOP_K):
        best = tl.max(candidates, 1)
        best_id = tl.min(tl.where(candidates == best[:, None], experts[None, :], EXPERTS_POW2), 1)
        weight = tl.where(best == 2.0, float("nan"), best)
        topk_weights = tl.where(choices[None, :] == choice, weight[:, None], topk_weights)
        topk_ids = tl.where(choices[None, :] == choice, best_id[:, None], topk_ids)
        candidates = tl.where(experts[None, :] == best_id[:, None], -1.0, candidates)
    if RENORMALIZE:
        topk_weights = tl.div_rn(topk_weights, tl.sum(topk_weights, 1)[:, None])
    return topk_weights, topk_ids


@triton.jit
def route_block(
    logits_ptr,
    stride_logits,
    padding_ptr,
    first_token,
    num_tokens,
    BLOCK_T: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    HAS_PADDING: tl.constexpr,
):
    """`moe_routing.route_step` on the rows from `first_token` on: `route_rows`, and with `HAS_PADDING` the
    padding rows (`padding_ptr`'s nonzero ones) sent to no expert (`NUM_EXPERTS`) at weight 0
    (`moe_routing.padding_to_no_expert`)."""
    topk_weights, topk_ids = route_rows(
        logits_ptr,
        stride_logits,
        first_token,
        num_tokens,
        BLOCK_T,
        NUM_EXPERTS,
        EXPERTS_POW2,
        TOP_K,
        TOP_K_POW2,
        RENORMALIZE,
    )
    if HAS_PADDING:
        tokens = first_token + tl.arange(0, BLOCK_T)
        is_padding = (tl.load(padding_ptr + tokens, tokens < num_tokens, 0) != 0)[:, None]
        topk_ids = tl.where(is_padding, NUM_EXPERTS, topk_ids)
        topk_weights = tl.where(is_padding, 0.0, topk_weights)
    return topk_weights, topk_ids


@triton.jit
def store_routing(
    weights_ptr,
    ids_ptr,
    topk_weights,
    topk_ids,
    first_token,
    num_tokens,
    BLOCK_T: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
):
    """A block's routing stored as `route_step` returns it: weights `[T, k]` in `weights_ptr`'s dtype,
    experts `[T, k]` int64."""
    tokens = first_token + tl.arange(0, BLOCK_T)
    choices = tl.arange(0, TOP_K_POW2)
    chosen = (tokens < num_tokens)[:, None] & (choices < TOP_K)[None, :]
    pairs = tokens[:, None] * TOP_K + choices[None, :]
    tl.store(weights_ptr + pairs, topk_weights.to(weights_ptr.dtype.element_ty), chosen)
    tl.store(ids_ptr + pairs, topk_ids.to(tl.int64), chosen)
