"""`nvllm::fused_experts`: a mixture-of-experts layer's experts, each token through the gated MLPs its router
chose, weighted by the router and summed, as one custom op, so that the whole layer traces into the compiled
graph whatever the routing (the op is opaque to dynamo; its work depends on the data). `nvllm::routed_experts`
takes the router's logits instead and routes inside the op, so that a small batch's routing is one kernel
(`model.moe_routing_kernel`).

On CUDA it runs the Triton kernels (`nvllm.ops.moe_route_triton`, `nvllm.ops.moe_triton`: no host sync, so
it is captured in CUDA graphs); elsewhere the torch routing (`nvllm.ops.moe_routing`) and the torch
reference below, which is also the GPU tests' oracle."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nvllm.ops import moe_tiles
from nvllm.ops.fp8 import dequantize_groups, fp8_linear_reference, quantize_groups, quantize_rows
from nvllm.ops.moe_routing import route_step
from nvllm.ops.op_library import inference_op, register_fake

# With `model.fp8_activations`, the experts quantize their activations in batches of at least this many
# tokens (prefill, where the fp8 tensor cores' rate pays); smaller batches (decode) multiply their bf16
# activations by the converted fp8 weights, which were as fast at 512 tokens and faster below
# (experiments/results/2026-12-05-h100-moe-fp8-activations-by-batch.md).
FP8_ACTIVATIONS_MIN_TOKENS = 1024


def quantizes_activations(num_tokens: int, fp8_activations: bool) -> bool:
    """Whether the experts multiply quantized activations in a batch of `num_tokens`, `model.fp8_activations`
    being `fp8_activations`: on CUDA and the CPU alike, so that the reference computes what the kernels do."""
    return fp8_activations and num_tokens >= FP8_ACTIVATIONS_MIN_TOKENS


def expert_matmul(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, expert: int):
    """`x @ weight[expert]ᵀ`; with `scales` (fp8 experts) as `nvllm.ops.fp8` multiplies by a quantized
    weight: in fp32, each output column times its row's scale, rounded once."""
    if scales is None:
        return F.linear(x, weight[expert])
    return fp8_linear_reference(x, weight[expert], scales[expert])


def quantized_activations_expert(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    gate_up_scale: torch.Tensor,
    down_scale: torch.Tensor,
    expert: int,
) -> torch.Tensor:
    """fp8 expert `expert`'s gated MLP on the rows `x` as the fp8 tensor cores compute it: `x` quantized a
    scale per row (`quantize_rows`), the intermediate activations in groups of `FP8_INTERMEDIATE_GROUP`
    columns, or rounded to bf16 and then quantized a scale per row where `FP8_INTERMEDIATE_PER_ROW`; each
    product accumulated in fp32 and scaled, unrounded (fp32 `[rows, H]`)."""
    x_q, x_scale = quantize_rows(x)
    gate_up_out = (x_q.float() @ gate_up[expert].float().T) * x_scale[:, None] * gate_up_scale[expert]
    gate, up = gate_up_out.chunk(2, -1)
    activated = F.silu(gate) * up
    if moe_tiles.FP8_INTERMEDIATE_PER_ROW:
        activated_q, activated_scale = quantize_rows(activated.to(torch.bfloat16).float())
        activated = activated_q.float() * activated_scale[:, None]
    else:
        group = moe_tiles.FP8_INTERMEDIATE_GROUP
        activated = dequantize_groups(*quantize_groups(activated, group), group)
    return (activated @ down[expert].float().T) * down_scale[expert]


def experts_reference(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`sum_j w[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t))` over each token's chosen experts e = ids[t, j].
    `x` [T, H], `gate_up` [E, 2I, H] (gate rows, then up rows), `down` [E, H, I], `topk_*` [T, k]; fp8 experts
    come with a scale per row, `gate_up_scale` [E, 2I] and `down_scale` [E, H] (`nvllm.ops.fp8`), and with
    `quantize_activations` multiply quantized activations (`quantized_activations_expert`; the pairs then
    summed in fp32, each first rounded to `x`'s dtype where `moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`, and
    rounded once). The (token, choice) pairs are sorted by expert once; each expert that has tokens runs on
    all of them at once (the host reads how many each has). Pairs of expert E, one past the last, go to no
    expert (`nvllm.ops.moe_routing.padding_to_no_expert`) and add nothing."""
    top_k = topk_ids.shape[1]
    num_experts = gate_up.shape[0]
    pairs_by_expert = topk_ids.flatten().argsort(stable=True)
    # the pairs of no expert sort last, past every expert's run
    counts = torch.bincount(topk_ids.flatten(), minlength=num_experts).tolist()[:num_experts]
    pair_weights = topk_weights.flatten()
    out = torch.zeros_like(x, dtype=torch.float32 if quantize_activations else x.dtype)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        pairs = pairs_by_expert[start : start + count]
        tokens = pairs // top_k
        if quantize_activations:
            y = quantized_activations_expert(x[tokens], gate_up, down, gate_up_scale, down_scale, expert)
        else:
            gate, up = expert_matmul(x[tokens], gate_up, gate_up_scale, expert).chunk(2, -1)
            y = expert_matmul(F.silu(gate) * up, down, down_scale, expert)
        weighted = y * pair_weights[pairs, None]
        if quantize_activations:  # fp32 products, rounded as the kernels store each pair
            weighted = weighted.to(moe_tiles.pair_output_dtype(x.dtype)).float()
        out.index_add_(0, tokens, weighted)
        start += count
    return out.to(x.dtype)


@inference_op("fused_experts", mutates_args=())
def fused_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gate_up_scale: torch.Tensor | None = None,
    down_scale: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`experts_reference`'s result; on CUDA from the Triton grouped matmuls, or for a few tokens the
    skinny experts (`nvllm.ops.moe_skinny_triton`). `quantize_activations` (`model.fp8_activations`) holds
    for batches `quantizes_activations` says."""
    quantize_activations = quantizes_activations(x.shape[0], quantize_activations)
    quantized = (gate_up_scale, down_scale, quantize_activations)
    if x.is_cuda:
        from nvllm.ops.moe_skinny_triton import skinny_experts, takes_skinny_experts
        from nvllm.ops.moe_triton import grouped_experts

        if takes_skinny_experts(x.shape[0], gate_up.element_size(), quantize_activations):
            scales = dict(gate_up_scale=gate_up_scale, down_scale=down_scale)
            routing = (topk_weights, topk_ids)
            return skinny_experts(x, gate_up, down, topk_ids.shape[1], routing=routing, **scales)
        return grouped_experts(x, gate_up, down, topk_weights, topk_ids, *quantized)
    return experts_reference(x, gate_up, down, topk_weights, topk_ids, *quantized)


@register_fake(fused_experts)
def _(
    x, gate_up, down, topk_weights, topk_ids, gate_up_scale=None, down_scale=None, quantize_activations=False
):
    return torch.empty_like(x)


@inference_op("routed_experts", mutates_args=())
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
    """`fused_experts` of `route_step(router_logits, padding, top_k, renormalize)`'s routing, the routing
    inside the op: on CUDA by Triton kernels (`model.moe_routing_kernel`), one in all for a small batch."""
    quantize_activations = quantizes_activations(x.shape[0], quantize_activations)
    quantized = (gate_up_scale, down_scale, quantize_activations)
    if x.is_cuda:
        from nvllm.ops.moe_route_triton import routed_experts as routed_on_cuda

        return routed_on_cuda(x, gate_up, down, router_logits, padding, top_k, renormalize, *quantized)
    weights, ids = route_step(router_logits, padding, top_k, renormalize)
    return experts_reference(x, gate_up, down, weights, ids, *quantized)


@register_fake(routed_experts)
def _(
    x,
    gate_up,
    down,
    router_logits,
    padding,
    top_k,
    renormalize,
    gate_up_scale=None,
    down_scale=None,
    quantize_activations=False,
):
    return torch.empty_like(x)
