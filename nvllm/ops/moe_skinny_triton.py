"""A few tokens' mixture-of-experts layer as two Triton kernels, without sorting the pairs by expert: the
skinny matmul's idea (`nvllm.ops.skinny_matmul`) for experts, on the CUDA cores.

A single stream's MoE layer is latency, not bytes: the grouped path (`nvllm.ops.moe_triton`) runs the
routing, the sort by expert, two grouped matmuls and the sum of each token's pairs, five or more launches
for a few megabytes of weights. With a few tokens every (token, choice) pair is nearly always its own
expert, so the sort buys nothing, and each pair can read its expert's rows directly:
- gate/up: a program per pair and strip of intermediate columns; `silu(gate) * up` of the pair's token
  against its expert's rows, written at the pair's row of an `[pairs, I]` intermediate, as the grouped
  gate/up writes it;
- down: a program per token and strip of output columns, reading its token's k experts' slices side by side,
  each expert's sums times its row scales and the pair's routing weight added in fp32, rounded once at the
  end: what the grouped down matmul and `sum_pairs` give (up to the order of fp32 sums), with no pair
  outputs in memory.
Both multiply on the CUDA cores: each program keeps a tile of fp32 products in registers, adds to it element
by element across its loop (independent multiply-adds) and sums it over the reduction once at the end.
Tensor-core dots on rows padded to 16 were the first way: they give each warp eight columns and a chain of
MMAs as long as the reduction, one warp a scheduler, and ran at a third of the memory's bandwidth
(experiments/results/2026-12-05-h100-single-stream-kernels.md).

The routing either comes in (`route_step`'s weights and experts, computed before) or is computed by each
gate/up program from the router's logits (`nvllm.ops.moe_topk_triton`'s rule, over a few hundred logits),
the first strip's program of each pair writing it for the down kernel to read: then the whole layer after
the router is these two launches, routing once. Pairs that share an expert read it
once each, so this path is for batches of at most `SKINNY_EXPERTS_MAX_TOKENS` tokens. A pair of routing
weight 0 reads nothing and adds nothing: padding tokens' pairs (`nvllm.ops.moe_routing.padding_to_no_expert`;
their rows come out zeros), and a real pair only where its probability underflowed to 0 (its product would
add 0, or NaN where the expert's output is infinite, which the reference would carry).

Weights in fp8 are converted to fp32 in registers by Triton's conversion, not by moving bits
(`nvllm.ops.e4m3_to_bf16` says why); activations stay in their dtype (with `model.fp8_activations` the
grouped path serves every batch)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.moe_topk_triton import route_rows
from nvllm.ops.pdl import launch_next_kernel, pdl_launch, wait_for_prior_kernel

# The largest batch the skinny path serves, by the bytes of an expert weight (1: fp8, 2: bf16); 0 turns it
# off (every batch takes the grouped matmuls). Two tokens: the graph a single stream runs in (one token and
# its padding), faster on fp8 experts (experiments/results/2026-12-05-moe-skinny-experts-fp8-activations.md).
# bf16 experts keep the grouped path: their single stream was slower with the skinny ones, then on tensor
# cores (experiments/results/2026-12-05-h100-moe-fp8-activations-by-batch.md); not timed since.
SKINNY_EXPERTS_MAX_TOKENS = {1: 2, 2: 0}

# (BLOCK_N, BLOCK_K, num_warps, num_stages) by the bytes of an expert weight: `moe_bench --skinny`'s fastest
# for fp8 on the H100 at a single stream's and two streams' batches
# (experiments/results/2026-12-05-h100-fma-single-stream.md), swept while the kernels still moved bits.
# bf16's are fp8's, not swept (bf16 experts take the grouped path); fp32 (the interpreter's tests) takes
# them.
GATE_UP_LAUNCH = {1: (8, 512, 4, 1), 2: (8, 512, 4, 1)}
DOWN_LAUNCH = {1: (2, 256, 4, 1), 2: (2, 256, 4, 1)}


def takes_skinny_experts(num_tokens: int, weight_bytes: int, quantize_activations: bool) -> bool:
    """Whether a batch of `num_tokens` takes this path: a few tokens, on experts whose weights take
    `weight_bytes` an element, multiplying the activations as they are."""
    limit = SKINNY_EXPERTS_MAX_TOKENS.get(weight_bytes, 0)
    return 0 < num_tokens <= limit and not quantize_activations


@triton.jit
def _token_routing(
    token,
    logits_ptr,
    stride_logits,
    topk_weights_ptr,
    topk_ids_ptr,
    padding_ptr,
    num_tokens,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    ROUTE_HERE: tl.constexpr,
    HAS_PADDING: tl.constexpr,
):
    """A token's routing weights (fp32, rounded to the routing's dtype first, as `route_step` returns them)
    and experts `[TOP_K_POW2]`: routed here from its logits (a padding token's weights 0), or read from
    `route_step`'s result."""
    if ROUTE_HERE:
        weights, ids = route_rows(
            logits_ptr,
            stride_logits,
            token,
            num_tokens,
            1,
            NUM_EXPERTS,
            EXPERTS_POW2,
            TOP_K,
            TOP_K_POW2,
            RENORMALIZE,
        )
        weights = tl.sum(weights, 0).to(logits_ptr.dtype.element_ty).to(tl.float32)
        ids = tl.sum(ids, 0)
        if HAS_PADDING:
            weights = tl.where(tl.load(padding_ptr + token) != 0, 0.0, weights)
    else:
        weights, ids = _given_routing(token, topk_weights_ptr, topk_ids_ptr, TOP_K, TOP_K_POW2)
    return weights, ids


@triton.jit
def _given_routing(token, topk_weights_ptr, topk_ids_ptr, TOP_K: tl.constexpr, TOP_K_POW2: tl.constexpr):
    """A token's routing read from `[T, TOP_K]` weights and experts: fp32 weights and int32 experts
    `[TOP_K_POW2]`, the choices past TOP_K at weight 0."""
    choices = tl.arange(0, TOP_K_POW2)
    chosen = choices < TOP_K
    weights = tl.load(topk_weights_ptr + token * TOP_K + choices, chosen, 0.0).to(tl.float32)
    ids = tl.load(topk_ids_ptr + token * TOP_K + choices, chosen, 0).to(tl.int32)
    return weights, ids


@triton.jit
def _chosen(values, choice, TOP_K_POW2: tl.constexpr):
    """`values[choice]` of a `[TOP_K_POW2]` register tensor."""
    return tl.sum(tl.where(tl.arange(0, TOP_K_POW2) == choice, values, 0), 0)


@triton.jit
def _skinny_gate_up_kernel(
    x_ptr,  # [T, H]
    w_ptr,  # [E, 2I, H]: gate rows, then up rows
    w_scale_ptr,  # [E, 2I] where SCALED
    out_ptr,  # [T * TOP_K, I]
    logits_ptr,
    topk_weights_ptr,
    topk_ids_ptr,
    padding_ptr,
    num_tokens,
    N,
    K,
    stride_x,
    stride_logits,
    stride_we,
    stride_wn,
    stride_se,
    stride_out,
    routed_weights_ptr,  # [T * TOP_K] fp32 where ROUTE_HERE: the routing, written for the down kernel
    routed_ids_ptr,  # [T * TOP_K] int32 where ROUTE_HERE
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    ROUTE_HERE: tl.constexpr,
    HAS_PADDING: tl.constexpr,
    SCALED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """Each pair's `silu(gate) * up` for a strip of `BLOCK_N` intermediate columns: a `[BLOCK_N, BLOCK_K]`
    tile of products per gate and up, added element by element across the loop and summed over the
    reduction once at the end, times the rows' scales where SCALED."""
    wait_for_prior_kernel(PDL)  # the logits (or the routing) and x are the kernels' before
    pair = tl.program_id(0)
    token = pair // TOP_K
    weights, ids = _token_routing(
        token,
        logits_ptr,
        stride_logits,
        topk_weights_ptr,
        topk_ids_ptr,
        padding_ptr,
        num_tokens,
        NUM_EXPERTS,
        EXPERTS_POW2,
        TOP_K,
        TOP_K_POW2,
        RENORMALIZE,
        ROUTE_HERE,
        HAS_PADDING,
    )
    weight = _chosen(weights, pair % TOP_K, TOP_K_POW2)
    expert = _chosen(ids, pair % TOP_K, TOP_K_POW2)
    if ROUTE_HERE and tl.program_id(1) == 0:  # the pair's routing, so that the down kernel reads it
        tl.store(routed_weights_ptr + pair, weight)
        tl.store(routed_ids_ptr + pair, expert)
    if weight == 0:  # a pair that adds nothing reads nothing
        launch_next_kernel(PDL)
        return
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = columns < N
    gate_rows = w_ptr + expert.to(tl.int64) * stride_we + columns[:, None] * stride_wn
    up_rows = gate_rows + N * stride_wn
    gate = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    up = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_inside = ks < K
        a = tl.load(x_ptr + token * stride_x + ks, k_inside, 0.0).to(tl.float32)[None, :]
        mask = inside[:, None] & k_inside[None, :]
        gate += tl.load(gate_rows + ks[None, :], mask, 0.0).to(tl.float32) * a
        up += tl.load(up_rows + ks[None, :], mask, 0.0).to(tl.float32) * a
    launch_next_kernel(PDL)  # after the loop: the next kernel's programs would take this one's SM slots
    gate_sum, up_sum = tl.sum(gate, 1), tl.sum(up, 1)
    if SCALED:  # a row's scale comes out of its sums (nvllm.ops.fp8)
        scales = w_scale_ptr + expert * stride_se + columns
        gate_sum = gate_sum * tl.load(scales, inside, 0.0)
        up_sum = up_sum * tl.load(scales + N, inside, 0.0)
    activated = gate_sum * tl.sigmoid(gate_sum) * up_sum
    tl.store(out_ptr + pair * stride_out + columns, activated.to(out_ptr.dtype.element_ty), inside)


@triton.jit
def _skinny_down_kernel(
    a_ptr,  # [T * TOP_K, I]: the gate/up kernel's output
    w_ptr,  # [E, H, I]
    w_scale_ptr,  # [E, H] where SCALED
    out_ptr,  # [T, H]
    topk_weights_ptr,  # [T, TOP_K]: given, or written by the gate/up kernel that routed
    topk_ids_ptr,  # [T, TOP_K]
    N,
    K,
    stride_a,
    stride_we,
    stride_wn,
    stride_se,
    stride_out,
    TOP_K: tl.constexpr,
    TOP_K_POW2: tl.constexpr,
    SCALED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """A token's `BLOCK_N` output columns: its k experts' `[BLOCK_N, BLOCK_K]` tiles
    read side by side (a load's wait is not repeated expert after expert), their products with the pairs'
    intermediates times the routing weights added element by element, then summed over the reduction,
    scaled by each expert's row scales and summed over the experts in fp32. A padding token (every weight
    0) reads nothing and writes zeros."""
    wait_for_prior_kernel(PDL)  # the intermediate (and the routing, where routed) is the kernel's before
    token = tl.program_id(0)
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = columns < N
    weights, ids = _given_routing(token, topk_weights_ptr, topk_ids_ptr, TOP_K, TOP_K_POW2)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if tl.max(tl.abs(weights), 0) != 0:
        # a pair gate/up skipped (weight 0) has its row unwritten: neither it nor its expert is read
        live = weights != 0
        experts = ids.to(tl.int64)
        rows = w_ptr + experts[:, None, None] * stride_we + columns[None, :, None] * stride_wn
        pair_rows = a_ptr + (token * TOP_K + tl.arange(0, TOP_K_POW2)).to(tl.int64)[:, None] * stride_a
        products = tl.zeros((TOP_K_POW2, BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_inside = live[:, None] & (ks < K)[None, :]
            a = tl.load(pair_rows + ks[None, :], k_inside, 0.0).to(tl.float32) * weights[:, None]
            w_mask = k_inside[:, None, :] & inside[None, :, None]
            w = tl.load(rows + ks[None, None, :], w_mask, 0.0)
            products += w.to(tl.float32) * a[:, None, :]
        summed = tl.sum(products, 2)
        if SCALED:
            scales = w_scale_ptr + experts[:, None] * stride_se + columns[None, :]
            summed = summed * tl.load(scales, live[:, None] & inside[None, :], 0.0)
        total = tl.sum(summed, 0)
    launch_next_kernel(PDL)
    tl.store(out_ptr + token * stride_out + columns, total.to(out_ptr.dtype.element_ty), inside)


def skinny_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    top_k: int,
    routing: tuple[torch.Tensor, torch.Tensor] | None = None,
    router_logits: torch.Tensor | None = None,
    padding: torch.Tensor | None = None,
    renormalize: bool = True,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """`experts_reference`'s result for a few tokens `x` `[T, H]` from two launches: with `routing` (the
    step's `(weights, ids)`, `route_step`'s), or routed in the kernels from `router_logits` `[T, E]`,
    `padding` and `renormalize` as `route_step` routes (padding rows come out zero). fp8 experts come with
    their row scales."""
    if x.shape[0] == 0:
        return torch.empty_like(x)
    activated, routed = skinny_gate_up(
        x, gate_up, top_k, routing, router_logits, padding, renormalize, gate_up_scale
    )
    return skinny_down(activated, down, routed, top_k, x, down_scale)


def skinny_gate_up(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    top_k: int,
    routing: tuple[torch.Tensor, torch.Tensor] | None = None,
    router_logits: torch.Tensor | None = None,
    padding: torch.Tensor | None = None,
    renormalize: bool = True,
    gate_up_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The first launch of `skinny_experts`: each pair's `silu(gate) * up` `[T * top_k, I]`, and the routing
    the down launch reads, `(weights, ids)` `[T * top_k]` (given, or written by the kernel that routed)."""
    assert (routing is None) != (router_logits is None), "the routing, or the logits to route by"
    num_tokens, hidden = x.shape
    num_experts, intermediate = gate_up.shape[0], gate_up.shape[1] // 2
    x, gate_up = x.contiguous(), gate_up.contiguous()
    route_here = routing is None
    if route_here:
        logits = router_logits.contiguous()
        topk_weights = topk_ids = logits
        # the gate/up kernel writes the routing it computed for the down kernel to read
        routed = (
            x.new_empty(num_tokens * top_k, dtype=torch.float32),
            x.new_empty(num_tokens * top_k, dtype=torch.int32),
        )
    else:
        topk_weights, topk_ids = (part.contiguous() for part in routing)
        logits = topk_weights
        routed = (topk_weights, topk_ids)
    # routed here, padding tokens get weight 0; a given routing has them at weight 0 already
    padding_mask = padding.view(torch.uint8) if route_here and padding is not None else None
    activated = x.new_empty((num_tokens * top_k, intermediate))
    block_n, block_k, warps, stages = GATE_UP_LAUNCH[min(gate_up.element_size(), 2)]
    _skinny_gate_up_kernel[(num_tokens * top_k, triton.cdiv(intermediate, block_n))](
        x,
        gate_up,
        gate_up if gate_up_scale is None else gate_up_scale,
        activated,
        logits,
        topk_weights,
        topk_ids,
        x if padding_mask is None else padding_mask,
        num_tokens,
        intermediate,
        hidden,
        x.stride(0),
        logits.stride(0),
        gate_up.stride(0),
        gate_up.stride(1),
        0 if gate_up_scale is None else gate_up_scale.stride(0),
        activated.stride(0),
        *routed,
        NUM_EXPERTS=num_experts,
        EXPERTS_POW2=triton.next_power_of_2(num_experts),
        TOP_K=top_k,
        TOP_K_POW2=triton.next_power_of_2(top_k),
        RENORMALIZE=renormalize,
        ROUTE_HERE=route_here,
        HAS_PADDING=padding_mask is not None,
        SCALED=gate_up_scale is not None,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        num_warps=warps,
        num_stages=stages,
        **pdl_launch(x.device),
    )
    return activated, routed


def skinny_down(
    activated: torch.Tensor,
    down: torch.Tensor,
    routed: tuple[torch.Tensor, torch.Tensor],
    top_k: int,
    x: torch.Tensor,
    down_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The second launch of `skinny_experts`: each token's k pairs through their experts' down rows, weighted
    and summed, `[T, H]` in `x`'s dtype."""
    hidden = down.shape[1]
    down = down.contiguous()
    out = torch.empty_like(x)
    block_n, block_k, warps, stages = DOWN_LAUNCH[min(down.element_size(), 2)]
    _skinny_down_kernel[(x.shape[0], triton.cdiv(hidden, block_n))](
        activated,
        down,
        down if down_scale is None else down_scale,
        out,
        *routed,
        hidden,
        down.shape[2],
        activated.stride(0),
        down.stride(0),
        down.stride(1),
        0 if down_scale is None else down_scale.stride(0),
        out.stride(0),
        TOP_K=top_k,
        TOP_K_POW2=triton.next_power_of_2(top_k),
        SCALED=down_scale is not None,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        num_warps=warps,
        num_stages=stages,
        **pdl_launch(x.device),
    )
    return out
